// What a transparent-mode call stands for, read from its method, metadata and body
// without gRPC (the reactor in transparent_service.cc hands the pieces over; the fuzz
// targets call this directly).
#ifndef EONCE_DEDUPE_SIDECAR_DOORS_TRANSPARENT_CALL_H_
#define EONCE_DEDUPE_SIDECAR_DOORS_TRANSPARENT_CALL_H_

#include <string>

#include "eonce/v1/command.pb.h"

namespace eonce {

// The command a call with an idempotency-key header stands for: that key, the
// eonce-command-id header or else an id derived from the key (so every retry of the call
// is the same command), the method, the body as the request, and its payload hash. The
// Deduper validates it like any other command before anything is written.
v1::Command TransparentCommand(const std::string& method, const std::string& key,
                               const std::string& command_id_header, std::string request);

}  // namespace eonce

#endif  // EONCE_DEDUPE_SIDECAR_DOORS_TRANSPARENT_CALL_H_
