#include "tests/util/health_check.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/generic/generic_stub.h"

namespace eonce::testing {

int HealthStatus(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::ByteBuffer request, response;  // an empty HealthCheckRequest: the whole server
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = s;
                   done = true;
                   cv.notify_all();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  response.Dump(&slices);
  std::string bytes;
  for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status = 1}: field 1, varint.
  return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : 0;
}

}  // namespace eonce::testing
