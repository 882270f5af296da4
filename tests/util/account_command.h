// A producer's command on one ledger account, as the tests that drive the real agent
// send it: the agent fills in the key, the payload hash and the rest.
#ifndef EONCE_TESTS_UTIL_ACCOUNT_COMMAND_H_
#define EONCE_TESTS_UTIL_ACCOUNT_COMMAND_H_

#include <string>

#include "eonce/v1/command.pb.h"
#include "google/protobuf/message.h"

namespace eonce::testing {

inline v1::Command AccountCommand(const std::string& id, const std::string& method,
                                  const google::protobuf::Message& request,
                                  const std::string& account) {
  v1::Command c;
  c.set_command_id(id);
  c.set_target_method(method);
  c.set_request(request.SerializeAsString());
  c.mutable_entity()->set_type("account");
  c.mutable_entity()->set_id(account);
  return c;
}

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_ACCOUNT_COMMAND_H_
