#include "dedupe_sidecar/doors/transparent_call.h"

#include "common/command/command.h"

namespace eonce {

v1::Command TransparentCommand(const std::string& method, const std::string& key,
                               const std::string& command_id_header, std::string request) {
  v1::Command command;
  command.set_command_id(command_id_header.empty() ? CommandIdOfKey(key) : command_id_header);
  command.set_idempotency_key(key);
  command.set_target_method(method);
  command.set_request(std::move(request));
  // A transparent call names no entity: its key stands for one, so that its slot (when
  // the sidecar is sharded) is the key's.
  command.mutable_entity()->set_type("transparent");
  command.mutable_entity()->set_id(CommandIdOfKey(key));
  FillPayloadHash(&command);
  return command;
}

}  // namespace eonce
