// The flags of a process that coordinates through etcd (the sharded sidecar, the mover):
//   --etcd_endpoints   comma list of etcd members, host:port
//   --etcd_prefix      the keys' prefix (default /eonce/default)
//   --lease_ttl_ms     the shard lease's TTL (default 10000; 2000..300000)
//   --etcd_timeout_ms  each etcd call's deadline, failover included (default 2000)
//   --etcd_tls_cert, --etcd_tls_key, --etcd_tls_ca   mutual TLS to etcd (all or none): etcd
//                      usually has a CA of its own, so these are not the --tls_* files.
// Only binaries that link this library have them.
#ifndef EONCE_COMMON_COORD_ETCD_FLAGS_H_
#define EONCE_COMMON_COORD_ETCD_FLAGS_H_

#include "common/coord/etcd_map_store.h"

namespace eonce {

// The options the flags say; EtcdCoordination::Create validates them.
EtcdCoordOptions EtcdCoordOptionsFromFlags();

}  // namespace eonce

#endif  // EONCE_COMMON_COORD_ETCD_FLAGS_H_
