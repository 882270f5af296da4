"""Offline stand-in for rules_proto: every macro forwards to the native rule."""

def proto_library(**kwargs):
    native.proto_library(**kwargs)

def proto_lang_toolchain(**kwargs):
    native.proto_lang_toolchain(**kwargs)
