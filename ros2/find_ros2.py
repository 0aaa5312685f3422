#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Finds ROS 2's C client library for meson.build (-Dros2, docs/ros2.md).

Looks in the given prefixes (-Dros2_prefix), else in $AMENT_PREFIX_PATH (what sourcing
/opt/ros/<distro>/setup.bash sets). Prints key=value lines: the prefix, the ROS distro (from
$ROS_DISTRO or the rcl version), the include directories of every package the plugin uses, the
library directories, the directories the linker needs for rcl's own dependencies (the PyPI wheels
keep some in site-packages/ros_*.libs), and the Python version whose libpython rcl needs (the
PyPI wheels' librcl links the Python bindings of rcl_interfaces; a /opt/ros install does not).
Exit status 1 with a reason on stderr when no prefix has rcl.

Why not Meson's cmake dependency method: ament's CMake configurations export every transitive
library (Python bindings, Fast DDS and its OpenSSL among them) and need ament_cmake and
ament_package to be evaluated; what this plugin needs is rcl and five message packages' C
support, whose layout (include/<pkg>/, lib/lib<pkg>*.so) is the same in every ROS 2 install."""

import glob
import os
import re
import sys

PACKAGES = ["rcl", "rcutils", "rmw", "rcl_yaml_param_parser", "rosidl_runtime_c",
            "rosidl_typesupport_interface", "rosidl_dynamic_typesupport",
            "type_description_interfaces", "service_msgs", "builtin_interfaces", "std_msgs",
            "sensor_msgs", "trajectory_msgs", "rosgraph_msgs", "geometry_msgs",
            "rcl_logging_interface"]
# rosidl_dynamic_typesupport, type_description_interfaces and service_msgs exist from Jazzy on.
OPTIONAL = {"rosidl_dynamic_typesupport", "type_description_interfaces", "service_msgs"}


def main():
    prefixes = [p for p in sys.argv[1:] if p]
    if not prefixes:
        prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(":") if p]
    if not prefixes:
        sys.exit("no ROS 2 prefix: source /opt/ros/<distro>/setup.bash, or pass -Dros2_prefix=")
    home = next((p for p in prefixes if os.path.isfile(os.path.join(p, "include/rcl/rcl/rcl.h"))),
                None)
    if not home:
        sys.exit("no rcl headers (include/rcl/rcl/rcl.h) under " + ", ".join(prefixes))
    incs = []
    for pkg in PACKAGES:
        d = next((os.path.join(p, "include", pkg) for p in prefixes
                  if os.path.isdir(os.path.join(p, "include", pkg))), None)
        if d:
            incs.append(d)
        elif pkg not in OPTIONAL:
            sys.exit("ROS 2 package %s has no include/%s under %s" % (pkg, pkg, ", ".join(prefixes)))
    libdirs = [os.path.join(p, "lib") for p in prefixes if os.path.isdir(os.path.join(p, "lib"))]
    linkdirs = list(libdirs)
    py = ""
    for sp in sorted(glob.glob(os.path.join(home, "lib", "python3.*", "site-packages"))):
        wheel_libs = sorted(glob.glob(os.path.join(sp, "ros_*.libs")))
        if wheel_libs:
            linkdirs += wheel_libs
            py = re.sub(r"^python", "", os.path.basename(os.path.dirname(sp)))
    version = ""
    try:
        with open(os.path.join(home, "share/rcl/package.xml")) as f:
            m = re.search(r"<version>([^<]+)</version>", f.read())
            version = m.group(1) if m else ""
    except OSError:
        pass
    # The distro, from rcl's major version (each distro has its own): what the tests name it.
    distro = {"5": "humble", "6": "iron", "9": "jazzy", "10": "kilted"}.get(version.split(".")[0],
                                                                         "rcl" + version)
    print("prefix=" + home)
    print("rcl_version=" + version)
    print("distro=" + distro)
    print("include_dirs=" + ":".join(incs))
    print("lib_dirs=" + ":".join(libdirs))
    print("link_dirs=" + ":".join(linkdirs))
    print("libpython=" + py)


if __name__ == "__main__":
    main()
