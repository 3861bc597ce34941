// Package metrics exports the statistics of Homa sockets to Prometheus.
//
// The engine (package homa and its protocol core) keeps its counters and
// histograms and knows nothing of Prometheus. A Collector reads one socket's
// statistics when it is scraped and turns them into Prometheus metrics;
// nothing is registered globally, so the application picks the registry:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewCollector(s.Stats, prometheus.Labels{"socket": "server"}))
//	reg.MustRegister(metrics.NewBufferCollector(nil))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Sockets registered with one registry need different constant labels.
// The buffer pool is shared by every socket of a process: register one
// BufferCollector per process.
//
// # Metrics of a socket
//
// Counters (every label value is always reported, zero or not):
//
//	homa_packets_sent_total{type}              Homa packets sent
//	homa_packets_received_total{type}          Homa packets received with a valid type (including those dropped later)
//	homa_packet_bytes_sent_total{type}         bytes of those packets, Homa header included, IP/UDP header not
//	homa_packet_bytes_received_total{type}     likewise, received
//	homa_priority_packets_sent_total{priority} packets sent per network priority, "0" (lowest) to "7"
//	homa_packets_dropped_total{reason}         received packets dropped
//	homa_duplicate_packets_total               DATA packets received that carried no new bytes
//	homa_landed_packets_total{placed}          DATA payloads a read put where the next packet of a message was expected: "in_place" (not copied again) or "moved"
//	homa_retransmissions_total                 retransmissions (one per range a RESEND asked for, or restarted request)
//	homa_resent_packets_total                  DATA packets those retransmissions sent
//	homa_resends_issued_total                  RESEND packets issued to ask for missing data
//	homa_peer_timeouts_total                   RPCs ended because their peer said nothing about them through a timeout's RESENDs
//	homa_resends_ignored_total                 RESENDs unanswered: retransmitted less than a resend interval before, or budget spent
//	homa_timer_wakeups_total                   times the endpoint's timer woke it (none while idle)
//	homa_receive_path_events_total{event}      park (a reader parked on the socket), steal, handoff, timer_vain, timer_set
//	homa_socket_writes_total                   writes of packets to the socket (a system call each, sendmmsg where batched)
//	homa_io_errors_total{op}                   errors reading ("read") or writing ("write") the socket
//	homa_rpcs_started_total{role}              client: requests sent; server: requests whose first packet arrived
//	homa_rpcs_completed_total{role}            client: responses received whole; server: requests answered
//	homa_rpc_timeouts_total                    client RPCs failed because the server stopped answering
//	homa_rpcs_aborted_total                    client RPCs ended by Abort
//	homa_rpcs_unreachable_total                client RPCs failed at once by an ICMP report (no listener, host unreachable)
//	homa_requests_delivered_total              requests handed whole to the server application
//	homa_server_rpcs_acked_total               answered server RPCs freed by the client's acknowledgment
//	homa_server_rpcs_reclaimed_total           answered server RPCs freed after the client stayed silent
//	homa_server_rpcs_unreachable_total         server RPCs freed because the network reported their client unreachable
//	homa_rtt_samples_total                     round trips measured to stretch a slow peer's loss-recovery timers
//	homa_resends_deferred_total                RESENDs that waited for a turn (the peer's or the socket's RESEND budget was spent)
//	homa_resends_unneeded_total                RESENDs for responses that proved not needed (BUSY, or the first transmission came); each backs off the timing toward that server
//	homa_need_acks_deferred_total              NEED_ACKs that waited for a turn (the peer's NEED_ACK budget for the tick was spent)
//	homa_timers_run_total                      protocol timers that came due and ran
//	homa_request_bytes_total{role}             request bytes: sent by the client, received by the server
//	homa_response_bytes_total{role}            response bytes: received by the client, sent by the server
//	homa_grants_sent_total                     GRANTs decided by the receiver's SRPT scheduler
//	homa_granted_bytes_total                   bytes by which grants raised what senders may send
//	homa_fifo_grants_total                     grants made by the FIFO share to the oldest message
//	homa_fifo_granted_bytes_total              bytes granted by the FIFO share
//	homa_pacer_packets_total                   packets charged to the pacer's link budget
//	homa_pacer_bytes_total                     bytes (IP header included) charged to the pacer's budget
//	homa_pacer_throttled_total                 times the pacer held a packet back for its budget
//	homa_pacer_fifo_picks_total                packets the pacer sent from the oldest message (FIFO share)
//	homa_pacer_link_slices_total               a sharded socket's slices of its shared link's transmit time
//	homa_pacer_link_writes_total               a sharded socket's writes of its shared link's account (per slice, not per packet)
//	homa_requests_recalled_total{outcome}      refused requests asked for again as replies made room (recalled), not sent again in time (lapsed)
//	homa_messages_shed_total                   incoming messages discarded to make room (the heaviest peer's least active first)
//	homa_grants_revoked_total                  incoming messages that lost their grant: their sender left granted bytes unsent
//	homa_grants_deferred_total                 grants held back for lack of receive memory
//	homa_peers_evicted_total                   idle peers dropped from a full peer table
//	homa_peers_expired_total                   peers let go after a minute with nothing pending
//	homa_seen_expired_total                    records of a client port's finished ids let go after the port's silence
//	homa_seen_evicted_total                    records of a client port's finished ids forgotten to make room
//
// Gauges:
//
//	homa_active_rpcs{role}                     RPCs the socket holds now
//	homa_peers                                 hosts the socket keeps state for
//	homa_seen_clients                          client ports whose finished ids the server remembers
//	homa_grantable_messages                    incoming messages that still need grants
//	homa_incoming_bytes                        bytes granted (or unscheduled) and not yet received
//	homa_incoming_limit_bytes                  the bound grants keep those to now (a sharded socket's: its shards' floors and loans)
//	homa_incoming_lent_bytes                   a sharded socket's loans from its shared budget
//	homa_pacer_queue_messages                  outgoing messages waiting in the pacer's queue
//	homa_pacer_queue_bytes                     bytes left to send in them
//	homa_receive_memory_bytes                  receive storage committed for incoming messages
//	homa_incoming_server_rpcs                  server RPCs whose request is still arriving
//	homa_pending_replies                       server RPCs whose request awaits the application's reply
//
// The pacer's metrics stay zero unless the socket paces (sock.Config.LinkMbps).
//
// Histograms:
//
//	homa_rpc_duration_seconds{size_class}      client RPCs, from Send to the whole response
//	homa_message_size_bytes{direction,kind}    lengths of complete messages
//
// The RPC duration buckets run from 5 µs to 1 s: steps of about 1.5x up to
// 1 ms (5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750 µs),
// then 1, 2, 5, 10, 20, 50, 100, 200, 500 ms and 1 s. Failed RPCs are not
// observed. The message size buckets are the powers of two from 64 B to
// 1 MiB, which holds the largest message (1,000,000 bytes).
//
// Label values:
//
//	type        data, grant, resend, rpc_unknown, busy, cutoffs, freeze, need_ack, ack
//	reason      short (shorter than its header), unknown_type, bad_field (a field out of
//	            range or inconsistent), unknown_rpc (no RPC or peer matches), limit (a
//	            state limit refused new work), other_port (addressed to or acknowledging
//	            another port), ignored (FREEZE), stale (a late duplicate of a finished RPC),
//	            memory (no receive memory for its bytes), socket (discarded by the socket
//	            layer before parsing: shorter than a header, another port, too long)
//	role        client, server
//	size_class  the larger of request and response: 1k (up to 1,000 bytes), 10k, 100k, 1m
//	direction   sent, received
//	kind        request, response
//	op          read, write
//
// # Metrics of the buffer pool
//
//	homa_buffer_gets_total                     message and packet buffers taken from the pool or an endpoint's cache
//	homa_buffer_allocations_total              of which the pool had to allocate
//	homa_buffer_allocated_bytes_total          capacity of the allocated buffers
//	homa_buffer_discards_total                 returned buffers dropped because their free list was full
//	homa_buffer_trimmed_total                  free buffers let go of after going unused for a while (after load)
//	homa_buffer_pool_buffers                   gauge: buffers in the pool's free lists (not the endpoints' caches)
//	homa_buffer_pool_bytes                     gauge: their capacity
//	homa_buffer_cached_bytes                   gauge: capacity of the buffers in the endpoints' caches
package metrics
