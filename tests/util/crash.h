// Crashing a store in a test, as kill -9 and a power cut would.
#ifndef EONCE_TESTS_UTIL_CRASH_H_
#define EONCE_TESTS_UTIL_CRASH_H_

#include <memory>

#include "common/store/crash_fs.h"
#include "common/store/rocks.h"

namespace eonce::testing {

// The process holding `store` (opened on `fs`) dies: nothing it wrote without a sync
// survives. `store` is closed and reset, and `fs` is ready for the next process. A null
// `store` (nothing open yet) is left alone.
inline void CrashStore(CrashFileSystem& fs, std::unique_ptr<RocksStore>& store) {
  if (store == nullptr) return;
  fs.Crash();
  store->CloseWithoutFlush();
  store.reset();
  fs.Recover();
}

}  // namespace eonce::testing

#endif  // EONCE_TESTS_UTIL_CRASH_H_
