/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pi0::CpuBlockCache (inference/model/pi0cpucache.*): large CPU blocks kept for the next forward
 * pass instead of being unmapped and faulted in again. A block comes back for a request of its
 * rounded size, small requests go to the allocator it wraps, the limit is kept, two threads share
 * it, and installed as LibTorch's CPU allocator a tensor of a freed tensor's size gets its
 * memory back. */

#include "inference/model/pi0cpucache.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

using pi0::CpuBlockCache;

namespace
{

constexpr std::size_t kMiB = std::size_t (1) << 20;

} // namespace

TEST (CpuBlockCache, AFreedBlockServesTheNextRequestOfItsRoundedSize)
{
  CpuBlockCache cache (c10::GetDefaultCPUAllocator (), 64 * kMiB);
  void *first = nullptr;
  {
    c10::DataPtr a = cache.allocate (3 * kMiB);
    first = a.get ();
    ASSERT_NE (first, nullptr);
    EXPECT_EQ (reinterpret_cast<std::uintptr_t> (first) % CpuBlockCache::kGranule, 0u);
    std::memset (first, 0x5a, 3 * kMiB); // the whole block is ours to write
  }
  EXPECT_EQ (cache.stats ().misses, 1u);
  EXPECT_EQ (cache.stats ().cached, 4 * kMiB); // 3 MiB rounded up to the 2 MiB granule
  {
    c10::DataPtr b = cache.allocate (3 * kMiB + 12345); // rounds to 4 MiB as well
    EXPECT_EQ (b.get (), first);
    EXPECT_EQ (cache.stats ().hits, 1u);
    EXPECT_EQ (cache.stats ().cached, 0u);
    c10::DataPtr c = cache.allocate (6 * kMiB); // another size: a new block
    EXPECT_NE (c.get (), first);
    EXPECT_EQ (cache.stats ().misses, 2u);
  }
  EXPECT_EQ (cache.stats ().cached, 10 * kMiB);
  cache.trim ();
  EXPECT_EQ (cache.stats ().cached, 0u);
}

TEST (CpuBlockCache, SmallRequestsGoToTheAllocatorItWraps)
{
  CpuBlockCache cache (c10::GetDefaultCPUAllocator (), 64 * kMiB);
  c10::DataPtr a = cache.allocate (CpuBlockCache::kMinBlock - 1);
  ASSERT_NE (a.get (), nullptr);
  EXPECT_NE (a.get_context (), nullptr);
  const pi0::CpuBlockCacheStats s = cache.stats ();
  EXPECT_EQ (s.hits + s.misses, 0u);
  a.clear ();
  EXPECT_EQ (cache.stats ().cached, 0u);
}

/* oneDNN's scratch buffers: raw_allocate() and raw_deallocate(), the pointer alone. */
TEST (CpuBlockCache, RawAllocationsComeBackByPointerAlone)
{
  CpuBlockCache cache (c10::GetDefaultCPUAllocator (), 64 * kMiB);
  void *big = cache.raw_allocate (5 * kMiB);
  void *small = cache.raw_allocate (100);
  ASSERT_NE (big, nullptr);
  ASSERT_NE (small, nullptr);
  static_cast<char *> (small)[99] = 1;
  cache.raw_deallocate (small);
  cache.raw_deallocate (big);
  EXPECT_EQ (cache.stats ().cached, 6 * kMiB);
  c10::DataPtr again = cache.allocate (5 * kMiB);
  EXPECT_EQ (again.get (), big);
}

TEST (CpuBlockCache, KeepsNoMoreThanItsLimit)
{
  CpuBlockCache cache (c10::GetDefaultCPUAllocator (), 6 * kMiB);
  {
    c10::DataPtr a = cache.allocate (4 * kMiB), b = cache.allocate (4 * kMiB);
    EXPECT_NE (a.get (), b.get ());
  }
  const pi0::CpuBlockCacheStats s = cache.stats ();
  EXPECT_EQ (s.cached, 4 * kMiB); // the second would pass 6 MiB: freed
  EXPECT_EQ (s.released, 1u);
  EXPECT_EQ (s.limit, 6 * kMiB);
}

TEST (CpuBlockCache, TwoThreadsShareIt)
{
  CpuBlockCache cache (c10::GetDefaultCPUAllocator (), 64 * kMiB);
  auto work = [&cache] (std::size_t mib) {
    for (int i = 0; i < 200; i++) {
      c10::DataPtr p = cache.allocate (mib * kMiB);
      static_cast<char *> (p.get ())[mib * kMiB - 1] = 1;
    }
  };
  std::thread t1 (work, 2), t2 (work, 8);
  t1.join ();
  t2.join ();
  const pi0::CpuBlockCacheStats s = cache.stats ();
  EXPECT_EQ (s.hits + s.misses, 400u);
  EXPECT_LE (s.misses, 4u); // each thread's one block, give or take the other's timing
  EXPECT_EQ (s.cached, 10 * kMiB);
}

/* As the CPU policies install it: LibTorch's tensors come from it. */
TEST (CpuBlockCache, InstalledATensorGetsAFreedTensorsMemoryBack)
{
  CpuBlockCache *cache = pi0::install_cpu_block_cache ();
  ASSERT_NE (cache, nullptr) << "PI0_CPU_BLOCK_CACHE_MB=0 in the test's environment?";
  EXPECT_EQ (pi0::install_cpu_block_cache (), cache); // once per process
  const auto before = cache->stats ();
  void *first = nullptr;
  {
    at::Tensor a = at::ones ({3, 1024, 1024}, at::kFloat); // 12 MiB
    first = a.data_ptr ();
  }
  at::Tensor b = at::zeros ({3, 1024, 1024}, at::kFloat);
  EXPECT_EQ (b.data_ptr (), first);
  EXPECT_EQ (b.sum ().item<float> (), 0.f); // at::zeros still zeroes a reused block
  EXPECT_EQ (cache->stats ().hits, before.hits + 1);
  at::Tensor small = at::ones ({16}, at::kFloat);
  EXPECT_EQ (small.sum ().item<float> (), 16.f);
}
