# shellcheck shell=bash
# The environment a ROS 2 program needs, for the PyPI wheels' install (what sourcing
# /opt/ros/<distro>/setup.bash does for an apt install): source it, don't run it.
#   source scripts/ros2-env.sh [jazzy|kilted]     (default jazzy)
# rmw finds the message packages' type supports with dlopen, so the libraries must be on
# LD_LIBRARY_PATH (the wheels keep some of them in site-packages/ros_*.libs); AMENT_PREFIX_PATH
# is where ROS tools and rmw_implementation look for packages. Every ROS 2 process this project
# starts runs inside a network namespace with only lo up (docs/ros2.md, "Discovery").
_pi0_ros_distro="${1:-jazzy}"
_pi0_ros_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_pi0_ros_venv="$_pi0_ros_root/.ros-$_pi0_ros_distro-venv"
if [ ! -d "$_pi0_ros_venv/lib" ]; then
  echo "ros2-env.sh: no $_pi0_ros_venv (scripts/setup.sh --ros2 installs it)" >&2
  return 1 2>/dev/null || exit 1
fi
_pi0_ros_libs="$_pi0_ros_venv/lib"
for d in "$_pi0_ros_venv"/lib/python3*/site-packages/ros_*.libs; do
  [ -d "$d" ] && _pi0_ros_libs="$_pi0_ros_libs:$d"
done
export AMENT_PREFIX_PATH="$_pi0_ros_venv"
export LD_LIBRARY_PATH="$_pi0_ros_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
export ROS_DISTRO="$_pi0_ros_distro"
export PI0_ROS_PYTHON="$_pi0_ros_venv/bin/python"
unset _pi0_ros_distro _pi0_ros_root _pi0_ros_venv _pi0_ros_libs d
