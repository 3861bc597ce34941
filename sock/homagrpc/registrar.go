package homagrpc

import "google.golang.org/grpc"

// Mirror returns a grpc.ServiceRegistrar that registers every service on
// each of rs: one registration served over Homa by a Server and over
// HTTP/2 by a *grpc.Server, so that grpcurl, gateways and clients in
// other languages reach the same service as Homa clients:
//
//	hs, gs := homagrpc.NewServer(), grpc.NewServer()
//	both := homagrpc.Mirror(hs, gs)
//	pb.RegisterGreeterServer(both, &greeter{})
//	reflection.Register(both) // reflection on both, listing the same services
//
// Its GetServiceInfo is that of the first of rs that has the method (for
// reflection.Register, which needs it).
func Mirror(rs ...grpc.ServiceRegistrar) interface {
	grpc.ServiceRegistrar
	GetServiceInfo() map[string]grpc.ServiceInfo
} {
	return mirror(append([]grpc.ServiceRegistrar(nil), rs...))
}

type mirror []grpc.ServiceRegistrar

func (m mirror) RegisterService(desc *grpc.ServiceDesc, impl any) {
	for _, r := range m {
		r.RegisterService(desc, impl)
	}
}

func (m mirror) GetServiceInfo() map[string]grpc.ServiceInfo {
	for _, r := range m {
		if g, ok := r.(interface {
			GetServiceInfo() map[string]grpc.ServiceInfo
		}); ok {
			return g.GetServiceInfo()
		}
	}
	return map[string]grpc.ServiceInfo{}
}
