// grpc.health.v1 Check through a generic stub (Debian ships no health.proto).
#ifndef EONCE_TESTS_UTIL_HEALTH_CHECK_H_
#define EONCE_TESTS_UTIL_HEALTH_CHECK_H_

#include <memory>

#include "grpcpp/channel.h"

namespace eonce::testing {

// The whole server's status: 1 SERVING, 2 NOT_SERVING, -1 when the call failed.
int HealthStatus(const std::shared_ptr<grpc::Channel>& channel);

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_HEALTH_CHECK_H_
