/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer target for what the policy server reads from the network: msgpack observations
 * (serve/pi0codec.cpp) under each preset mapping. Built with clang -fsanitize=fuzzer,address,
 * undefined by tests/fuzz/meson.build and run briefly as a CI test; longer by hand:
 *   build/tests/fuzz/fuzz_observation -dict=tests/fuzz/observation.dict -max_total_time=3600
 * Besides "no crash, no out-of-bounds read, no UB": an accepted observation has exactly the
 * mapping's state size, only finite values, images that lie inside the message, and a prompt
 * that is valid UTF-8 without NUL; a refused one says why and keeps nothing. */

#include "serve/pi0codec.h"
#include "serve/pi0mapping.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace
{

void
check (bool ok)
{
  if (!ok)
    abort ();
}

const pi0::serve::Mapping &
mapping (int i)
{
  static pi0::serve::Mapping m[3];
  static bool loaded = false;
  if (!loaded) {
    std::string err;
    m[0] = *pi0::serve::load_mapping ("aloha", &err);
    m[1] = *pi0::serve::load_mapping ("droid", &err);
    m[2] = *pi0::serve::load_mapping ("libero", &err);
    loaded = true;
  }
  return m[i];
}

} // namespace

extern "C" int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  pi0::serve::DecodeLimits lim;
  lim.max_message = 1 << 20;
  for (int i = 0; i < 3; i++) {
    const auto &m = mapping (i);
    pi0::serve::Observation obs;
    std::string err;
    const bool ok = pi0::serve::decode_observation (data, size, m, lim, &obs, &err);
    if (!ok) {
      check (!err.empty ());
      check (obs.state.empty ());
      continue;
    }
    check ((int)obs.state.size () == m.state_dim);
    for (float v : obs.state)
      check (std::isfinite (v));
    check (obs.views[0].present);
    for (const auto &v : obs.views) {
      if (!v.present)
        continue;
      check (v.width >= 1 && v.height >= 1);
      check (v.data >= data && v.data + v.size () <= data + size);
    }
    if (obs.prompt)
      for (char c : *obs.prompt)
        check (c != '\0');
  }
  return 0;
}
