// ForwardsServiceImpl: eonce.v1.Forwards for a business built on services/inbox — a
// sidecar's forwards, many in one call. Each forwarded call runs through the business's
// in-process handler as the same call to its own method would (InboxUpstream: its own
// inbox transaction, the identity its item names), and the call is answered once every
// item's write is durable (one group commit for all of them), with one outcome per item,
// in order. A batch that is empty, too long, or names a malformed payload hash is refused
// whole with INVALID_ARGUMENT before anything runs.
#ifndef EONCE_SERVICES_INBOX_FORWARDS_SERVICE_H_
#define EONCE_SERVICES_INBOX_FORWARDS_SERVICE_H_

#include "eonce/v1/outcome.grpc.pb.h"
#include "services/inbox/inbox_upstream.h"

namespace eonce {

class ForwardsServiceImpl : public v1::Forwards::CallbackService {
 public:
  // As many forwards as a SubmitBatch carries commands.
  static constexpr int kMaxCalls = 64;

  // `upstream` runs the business's handlers; it must outlive the service.
  explicit ForwardsServiceImpl(InboxUpstream& upstream) : upstream_(upstream) {}

  grpc::ServerUnaryReactor* ForwardBatch(grpc::CallbackServerContext* context,
                                         const v1::ForwardBatchRequest* request,
                                         v1::ForwardBatchResponse* response) override;

 private:
  InboxUpstream& upstream_;
};

}  // namespace eonce

#endif  // EONCE_SERVICES_INBOX_FORWARDS_SERVICE_H_
