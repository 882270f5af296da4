#include "common/coord/etcd_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, etcd_endpoints, "",
          "etcd members holding the slot map and shard leases, as host:port,host:port");
ABSL_FLAG(std::string, etcd_prefix, eonce::kDefaultEtcdPrefix,
          "prefix of eonce's etcd keys (<prefix>/slotmap, <prefix>/shards/<shard>)");
ABSL_FLAG(int64_t, lease_ttl_ms, eonce::kDefaultLeaseTtlMs,
          "TTL of the shard lease (2000..300000); a shard serves until 1 s and 1% before "
          "etcd could expire it");
ABSL_FLAG(int64_t, etcd_timeout_ms, 2'000,
          "deadline of each etcd call, trying the next member while one is unavailable");
ABSL_FLAG(std::string, etcd_tls_cert, "",
          "PEM client certificate for etcd (mutual TLS; with etcd_tls_key and etcd_tls_ca)");
ABSL_FLAG(std::string, etcd_tls_key, "", "PEM private key of etcd_tls_cert");
ABSL_FLAG(std::string, etcd_tls_ca, "", "PEM CA bundle that signs etcd's certificates");

namespace eonce {

EtcdCoordOptions EtcdCoordOptionsFromFlags() {
  EtcdCoordOptions options;
  options.endpoints = absl::GetFlag(FLAGS_etcd_endpoints);
  options.prefix = absl::GetFlag(FLAGS_etcd_prefix);
  options.lease_ttl_ms = absl::GetFlag(FLAGS_lease_ttl_ms);
  options.call_timeout_ms = absl::GetFlag(FLAGS_etcd_timeout_ms);
  options.tls.cert_file = absl::GetFlag(FLAGS_etcd_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_etcd_tls_key);
  options.tls.ca_file = absl::GetFlag(FLAGS_etcd_tls_ca);
  return options;
}

}  // namespace eonce
