// SendOutlook: whether the agent would send a command at once, were it enqueued now at the
// head of its entity's lane. Outbox asks it as it writes a record, so that a record about
// to be sent carries its mark that it may have been sent (ever_sent) in the Enqueue's own
// synced write, and its first claim needs no sync of its own.
//
// A wrong "yes" is safe: a record marked but never sent is treated as maybe sent, so if it
// expires unsent (its agent died, or its credential was revoked, before the send) it waits
// for an operator instead of letting its entity's next command go. A "no" only costs the
// first claim its sync. Implemented by the Replayer.
#ifndef EONCE_OUTBOX_AGENT_CORE_SEND_OUTLOOK_H_
#define EONCE_OUTBOX_AGENT_CORE_SEND_OUTLOOK_H_

#include "eonce/v1/command.pb.h"

namespace eonce {

class SendOutlook {
 public:
  virtual ~SendOutlook() = default;
  // Thread-safe and cheap, asked on every Enqueue: no disk I/O (the Replayer's may start a
  // background fetch of a route's retention, as a scan would).
  virtual bool SendsAtOnce(const v1::Command& command) const = 0;
};

}  // namespace eonce

#endif  // EONCE_OUTBOX_AGENT_CORE_SEND_OUTLOOK_H_
