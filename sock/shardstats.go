package sock

import "reflect"

// addStats adds the counters of src to dst, field by field: numbers
// are summed, maps key by key, arrays and the Counts of histograms
// element by element (their Bounds are the same in every shard).
func addStats(dst *Stats, src Stats) {
	addValue(reflect.ValueOf(dst).Elem(), reflect.ValueOf(src))
}

func addValue(d, s reflect.Value) {
	switch d.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		d.SetInt(d.Int() + s.Int())
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
		d.SetUint(d.Uint() + s.Uint())
	case reflect.Struct:
		for i := range d.NumField() {
			if d.Type().Field(i).Name != "Bounds" {
				addValue(d.Field(i), s.Field(i))
			}
		}
	case reflect.Array:
		for i := range d.Len() {
			addValue(d.Index(i), s.Index(i))
		}
	case reflect.Slice:
		if d.Len() == s.Len() {
			for i := range d.Len() {
				addValue(d.Index(i), s.Index(i))
			}
		}
	case reflect.Map:
		if d.IsNil() && s.Len() > 0 {
			d.Set(reflect.MakeMap(d.Type()))
		}
		for it := s.MapRange(); it.Next(); {
			sum := reflect.New(d.Type().Elem()).Elem()
			if v := d.MapIndex(it.Key()); v.IsValid() {
				sum.Set(v)
			}
			addValue(sum, it.Value())
			d.SetMapIndex(it.Key(), sum)
		}
	}
}
