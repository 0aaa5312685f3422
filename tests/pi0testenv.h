/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Where a test finds things, for every test binary: the source and build trees (meson test sets
 * $PI0_SOURCE_ROOT and $PI0_BUILD_ROOT), the Python environments scripts/setup.sh makes, and a
 * temporary directory that goes away with everything in it. No GStreamer, no LibTorch. */
#pragma once

#include <glib.h>

#ifdef __SANITIZE_ADDRESS__
#include <dlfcn.h>
#include <exception>
extern "C" void __asan_init ();
#endif

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace pi0test
{

/* The source tree: $PI0_SOURCE_ROOT, or the current directory. */
inline std::string
source_root ()
{
  const char *r = g_getenv ("PI0_SOURCE_ROOT");
  return r && *r ? r : ".";
}

/* The build tree: $PI0_BUILD_ROOT, or ./build. */
inline std::string
build_root ()
{
  const char *r = g_getenv ("PI0_BUILD_ROOT");
  return r && *r ? r : "build";
}

/* The project's Python (.venv: torch, transformers, openpi-client), or "" when there is none. */
inline std::string
venv_python ()
{
  const std::string py = source_root () + "/.venv/bin/python";
  return g_file_test (py.c_str (), G_FILE_TEST_IS_EXECUTABLE) ? py : std::string ();
}

/* The real lerobot's Python (.lerobot-venv, Python 3.12), or "" when there is none. */
inline std::string
lerobot_python ()
{
  const std::string py = source_root () + "/.lerobot-venv/bin/python";
  return g_file_test (py.c_str (), G_FILE_TEST_IS_EXECUTABLE) ? py : std::string ();
}

/* A fresh directory under the system's temporary directory, removed with everything in it when
 * this goes. */
class TempDir
{
public:
  explicit TempDir (const std::string &prefix = "pi0test")
  {
    gchar *p = g_dir_make_tmp ((prefix + "-XXXXXX").c_str (), nullptr);
    if (!p)
      throw std::runtime_error ("cannot make a temporary directory");
    path_ = p;
    g_free (p);
  }
  ~TempDir ()
  {
    std::error_code ec;
    std::filesystem::remove_all (path_, ec);
  }
  TempDir (const TempDir &) = delete;
  TempDir &operator= (const TempDir &) = delete;

  const std::string &path () const { return path_; }
  /* The path of @name inside it; with @content, the file is written first. */
  std::string file (const std::string &name, const std::string &content = "") const
  {
    const std::string p = path_ + "/" + name;
    if (!content.empty ())
      std::ofstream (p, std::ios::binary) << content;
    return p;
  }

private:
  std::string path_;
};

/* What a child that is not built with the sanitizers (gst-launch-1.0, and the gst-plugin-scanner
 * it starts) needs in its environment to load this build's plugin: nothing in a normal build.
 * Under scripts/sanitize.sh the plugin is built with AddressSanitizer, which must be the first
 * library in a process, and its __cxa_throw interceptor needs libstdc++ loaded with it: the
 * child preloads both, the ones this test binary runs with. Its leaks (every system plugin the
 * scanner opens) are not ours: no leak check there. Returns (name, value) pairs to set. */
inline std::vector<std::pair<std::string, std::string>>
uninstrumented_child_env ()
{
  std::vector<std::pair<std::string, std::string>> env;
#ifdef __SANITIZE_ADDRESS__
  Dl_info asan{}, cxx{};
  if (!dladdr (reinterpret_cast<void *> (&__asan_init), &asan) || !asan.dli_fname ||
      !dladdr (reinterpret_cast<void *> (&std::terminate), &cxx) || !cxx.dli_fname)
    throw std::runtime_error ("cannot find the AddressSanitizer runtime or libstdc++");
  env.emplace_back ("LD_PRELOAD", std::string (asan.dli_fname) + ":" + cxx.dli_fname);
  const char *options = g_getenv ("ASAN_OPTIONS");
  env.emplace_back ("ASAN_OPTIONS", std::string (options ? options : "") + ":detect_leaks=0");
#endif
  return env;
}

/* The environment of a child gst-launch-1.0 that loads this build's plugin: its plugin
 * directory on both plugin paths, a registry of its own in @registry_dir (never the user's),
 * and uninstrumented_child_env(). Returns (name, value) pairs to set. */
inline std::vector<std::pair<std::string, std::string>>
gst_child_env (const std::string &registry_dir)
{
  std::vector<std::pair<std::string, std::string>> env = {
      {"GST_PLUGIN_PATH", build_root () + "/gst"},
      {"GST_PLUGIN_PATH_1_0", build_root () + "/gst"},
      {"GST_REGISTRY", registry_dir + "/registry.bin"}};
  for (auto &kv : uninstrumented_child_env ())
    env.push_back (kv);
  return env;
}

} // namespace pi0test
