/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A CPU allocator for LibTorch that keeps freed large blocks for the next forward pass.
 *
 * On the CPU every forward pass allocates the same large activations again (Gemma's MLP of the
 * prefix: [prefix length, mlp width] floats, 53 MB each for pi0 at 816 tokens). glibc's malloc
 * serves anything above 32 MiB (its largest mmap threshold) with a fresh mmap and gives it back
 * with munmap on free, so each such block is faulted in page by page, zeroed by the kernel, on
 * every pass: about 110 000 page faults per pass of the mid-size pi0 of bench/vs-peers, ~2 µs
 * each here (docs/perf.md, "Against LeRobot and openpi"). The CUDA side has LibTorch's caching
 * allocator; the CPU side has none. This one keeps blocks of 1 MiB and more (sizes rounded up to
 * 2 MiB, aligned to 2 MiB so that the kernel may back them with huge pages) in a free list by
 * size, up to a limit, and serves smaller requests from the allocator it replaces. */

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace pi0
{

struct CpuBlockCacheStats {
  uint64_t hits = 0;      /* large requests served from the cache */
  uint64_t misses = 0;    /* large requests that allocated a new block */
  uint64_t released = 0;  /* blocks freed because the cache was full */
  std::size_t cached = 0; /* bytes held in the free list now */
  std::size_t limit = 0;  /* the most it holds */
};

class CpuBlockCache final : public c10::Allocator
{
public:
  static constexpr std::size_t kMinBlock = std::size_t (1) << 20;
  static constexpr std::size_t kGranule = std::size_t (2) << 20;

  /* @base serves the requests under kMinBlock; @limit: the most bytes kept free. */
  CpuBlockCache (c10::Allocator *base, std::size_t limit) : base_ (base), limit_ (limit) {}
  ~CpuBlockCache () override;

  c10::DataPtr allocate (std::size_t n) override;
  void copy_data (void *dest, const void *src, std::size_t count) const override
  {
    default_copy_data (dest, src, count);
  }

  /* raw_allocate()/raw_deallocate() (oneDNN's scratch buffers use them): the pointer alone
   * says which block it is, so a block's DataPtr context is its data pointer. */
  c10::DeleterFnPtr raw_deleter () const override { return &CpuBlockCache::release; }

  CpuBlockCacheStats stats () const;
  /* Frees every block in the free list (blocks in use are not touched). */
  void trim ();

private:
  static void release (void *ptr);
  void give_back (void *ptr, std::size_t size);

  c10::Allocator *base_;
  const std::size_t limit_;
  mutable std::mutex lock_;
  std::multimap<std::size_t, void *> free_;
  CpuBlockCacheStats stats_;
};

/* Makes a CpuBlockCache LibTorch's CPU allocator for this process, once (later calls do
 * nothing), with the limit from PI0_CPU_BLOCK_CACHE_MB (MiB; default 1024; 0: not installed).
 * Called by the policies that run on the CPU. Returns the cache, or nullptr when not
 * installed. */
CpuBlockCache *install_cpu_block_cache ();

} // namespace pi0
