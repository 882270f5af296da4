// How the authorization matrix (authz_matrix_test.cc) reads an answer against a cell of
// its table (authz_matrix_rows.h).
#ifndef EONCE_TESTS_SECURITY_AUTHZ_MATRIX_JUDGE_H_
#define EONCE_TESTS_SECURITY_AUTHZ_MATRIX_JUDGE_H_

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "tests/security/authz_matrix_rows.h"
#include "tests/util/grpc_probe.h"

namespace eonce::authz {

// Identities from eonce-* headers (plaintext on loopback), or from certificates.
enum class Mode { kPlaintext, kMutualTls };

const char* ModeName(Mode mode);

// The refusal of a caller without identity (Anon()) at `door` in `mode`.
Refusal Unidentified(Mode mode, const std::string& door);

// Whether `got` is what `cell` says for a call at `door` in `mode`.
bool Holds(Mode mode, const Expect& cell, const std::string& door, const absl::Status& got);

// "PERMISSION_DENIED CREDENTIAL_REVOKED", "OK", "past every identity check", ...
std::string Describe(const absl::Status& status);
std::string Describe(Mode mode, const Expect& cell, const std::string& door);

// A refusal for who the caller is, or what it may do.
bool RefusedForIdentity(const absl::Status& status);

// A batch answers OK with a status per command (SubmitBatch, EnqueueBatch): the first
// command's status is the answer. Told by the response's shape (repeated `items` with
// code, message and error_details), so that a new batch call is read the same way.
absl::Status FirstItemStatus(const google::protobuf::MethodDescriptor& method,
                             const testing::ProbeAnswer& answer);

// The lines of `before` that `after` lacks ("-") and the lines `after` adds ("+").
std::string LineDiff(const std::string& before, const std::string& after);

}  // namespace eonce::authz

#endif  // EONCE_TESTS_SECURITY_AUTHZ_MATRIX_JUDGE_H_
