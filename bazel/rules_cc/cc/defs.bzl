"""Offline stand-in for rules_cc: every macro forwards to the native rule."""

def cc_library(**kwargs):
    native.cc_library(**kwargs)

def cc_binary(**kwargs):
    native.cc_binary(**kwargs)

def cc_test(**kwargs):
    native.cc_test(**kwargs)

def cc_import(**kwargs):
    native.cc_import(**kwargs)

def cc_proto_library(**kwargs):
    native.cc_proto_library(**kwargs)

def cc_toolchain(**kwargs):
    native.cc_toolchain(**kwargs)

def cc_toolchain_suite(**kwargs):
    native.cc_toolchain_suite(**kwargs)
