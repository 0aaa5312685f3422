// inference/io costs: saving and loading a synthetic checkpoint (fp32 and bf16), copying it
// into a module, and tokenizing a prompt. Prints a table; asserts nothing.
//   bench_io [MiB of weights, default 256] [tokenizer.model]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "inference/io/pi0checkpoint.h"
#include "inference/io/pi0safetensors.h"
#include "inference/io/pi0tokenizer.h"

namespace
{

double
ms_since (std::chrono::steady_clock::time_point t0)
{
  return std::chrono::duration<double, std::milli> (std::chrono::steady_clock::now () - t0)
      .count ();
}

template <typename Fn>
double
time_ms (Fn &&fn)
{
  auto t0 = std::chrono::steady_clock::now ();
  fn ();
  return ms_since (t0);
}

} // namespace

int
main (int argc, char **argv)
{
  const int64_t mib = argc > 1 ? std::stoll (argv[1]) : 256;
  const std::string dir = (std::filesystem::temp_directory_path () / "pi0-bench-io").string ();
  std::filesystem::create_directories (dir);

  // 64 layers of equal square fp32 matrices adding up to `mib`.
  const int layers = 64;
  const int64_t side = static_cast<int64_t> (std::sqrt (double (mib) * 1024 * 1024 / 4 / layers));
  auto module = std::make_shared<torch::nn::Module> ();
  pi0::TensorMap weights;
  for (int i = 0; i < layers; i++) {
    const std::string name = "w" + std::to_string (i);
    weights[name] = at::randn ({side, side});
    module->register_parameter (name, at::zeros ({side, side}));
  }
  std::printf ("io benchmark: %d tensors of %lldx%lld (%.0f MiB fp32)\n\n", layers, (long long)side,
               (long long)side, layers * side * side * 4.0 / (1 << 20));
  std::printf ("| step | fp32 file (ms) | bf16 file (ms) |\n| --- | --- | --- |\n");

  double save[2], map[2], touch[2], copy[2];
  for (int k = 0; k < 2; k++) {
    pi0::TensorMap w = weights;
    if (k == 1)
      for (auto &[n, t] : w)
        t = t.to (at::kBFloat16);
    const std::string path = dir + (k ? "/bf16.safetensors" : "/fp32.safetensors");
    save[k] = time_ms ([&] { pi0::save_safetensors (path, w); });
    pi0::TensorMap loaded;
    map[k] = time_ms ([&] { loaded = pi0::load_safetensors (path); });
    touch[k] = time_ms ([&] {
      double s = 0;
      for (auto &[n, t] : loaded)
        s += t.to (at::kFloat).sum ().item<double> ();
      if (s == 1234.5)
        std::printf ("!");
    });
    copy[k] = time_ms ([&] { pi0::load_state_dict (*module, loaded, path); });
    std::filesystem::remove (path);
  }
  std::printf ("| save_safetensors (incl. fsync) | %.1f | %.1f |\n", save[0], save[1]);
  std::printf ("| load_safetensors (mmap + header) | %.2f | %.2f |\n", map[0], map[1]);
  std::printf ("| first read of all data (sum) | %.1f | %.1f |\n", touch[0], touch[1]);
  std::printf ("| load_state_dict into fp32 module | %.1f | %.1f |\n", copy[0], copy[1]);

  if (argc > 2 && pi0::Tokenizer::available ()) {
    auto tok = pi0::Tokenizer::load (argv[2]);
    const int n = 2000;
    const double t = time_ms ([&] {
      for (int i = 0; i < n; i++)
        tok.encode_prompt ("pick up the red cube and place it in the bowl");
    });
    std::printf ("\n| tokenizer encode_prompt (48 tokens) | %.1f us per prompt |\n",
                 1000.0 * t / n);
  }
  std::filesystem::remove_all (dir);
  return 0;
}
