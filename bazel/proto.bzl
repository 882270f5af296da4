"""eonce_proto: one .proto file -> a C++ library with messages, gRPC stubs and gMock stubs.

protoc and grpc_cpp_plugin come from Debian (protobuf-compiler, protobuf-compiler-grpc).
Import paths are relative to the `proto/` folder, so `import "eonce/v1/command.proto";`.
"""

def eonce_proto(name, src, deps = [], grpc = True, visibility = None):
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc", base + "_mock.grpc.pb.h"]
    dep_srcs = [d + "_srcs" for d in deps]
    native.filegroup(
        name = name + "_srcs",
        srcs = [src] + dep_srcs,
        visibility = visibility,
    )
    grpc_flags = ""
    if grpc:
        grpc_flags = ("--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin " +
                      "--grpc_out=generate_mock_code=true:$(RULEDIR) ")
    native.genrule(
        name = name + "_gen",
        srcs = [src] + dep_srcs,
        outs = outs,
        cmd = ("protoc --proto_path=" + native.package_name() +
               " -I/usr/include --cpp_out=$(RULEDIR) " + grpc_flags +
               "$(location " + src + ")"),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + ["//bazel:protobuf"] + (["//bazel:grpc"] if grpc else []),
        visibility = visibility,
    )
