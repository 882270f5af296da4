// The --tls_cert, --tls_key, --tls_ca and --tls_refresh_s flags every eonce binary
// shares (or EONCE_TLS_CERT, ... from the environment).
#ifndef EONCE_COMMON_RPC_TLS_FLAGS_H_
#define EONCE_COMMON_RPC_TLS_FLAGS_H_

#include "common/rpc/tls.h"

namespace eonce {

TlsFiles TlsFilesFromFlags();

}  // namespace eonce

#endif  // EONCE_COMMON_RPC_TLS_FLAGS_H_
