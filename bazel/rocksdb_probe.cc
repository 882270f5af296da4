// Opens a RocksDB store, writes and reads one key with a synced write, and exits 0: the
// binary that rocksdb_build_test reads to learn which RocksDB the build linked.
#include <cstdio>
#include <memory>
#include <string>

#include "rocksdb/db.h"
#include "rocksdb/options.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rocksdb_probe DIR\n");
    return 2;
  }
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, argv[1], &raw);
  if (!s.ok()) {
    std::fprintf(stderr, "open: %s\n", s.ToString().c_str());
    return 1;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  std::string value;
  s = db->Put(sync, "key", "value");
  if (s.ok()) s = db->Get(rocksdb::ReadOptions(), "key", &value);
  if (!s.ok() || value != "value") {
    std::fprintf(stderr, "put and get: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
