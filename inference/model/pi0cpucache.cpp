/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "inference/model/pi0cpucache.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>

#include <cstdlib>
#include <string>
#include <unordered_map>

namespace pi0
{

namespace
{

/* The large blocks in use, by data pointer: whose they are and their size. One table for every
 * cache (a deleter gets only the pointer); never destroyed, as tensors may outlive statics. */
struct Live {
  CpuBlockCache *owner;
  std::size_t size;
};
std::mutex live_lock;
auto *live = new std::unordered_map<void *, Live> ();

} // namespace

CpuBlockCache::~CpuBlockCache ()
{
  trim ();
}

c10::DataPtr
CpuBlockCache::allocate (std::size_t n)
{
  if (n < kMinBlock)
    return base_->allocate (n);
  const std::size_t size = (n + kGranule - 1) / kGranule * kGranule;
  void *p = nullptr;
  {
    std::lock_guard<std::mutex> g (lock_);
    auto it = free_.find (size);
    if (it != free_.end ()) {
      p = it->second;
      free_.erase (it);
      stats_.cached -= size;
      stats_.hits++;
    } else {
      stats_.misses++;
    }
  }
  if (!p) {
    if (posix_memalign (&p, kGranule, size) != 0 || !p)
      TORCH_CHECK_WITH (OutOfMemoryError, false, "CPU out of memory: tried to allocate ", size,
                        " bytes");
    /* Huge pages where the system allows them on request (THP "madvise"): 512 times fewer
     * faults on the first pass. Advice only: its failure changes nothing. */
    (void)madvise (p, size, MADV_HUGEPAGE);
  }
  {
    std::lock_guard<std::mutex> g (live_lock);
    (*live)[p] = {this, size};
  }
  return {p, p, &CpuBlockCache::release, c10::Device (c10::DeviceType::CPU)};
}

void
CpuBlockCache::release (void *ptr)
{
  Live l{nullptr, 0};
  {
    std::lock_guard<std::mutex> g (live_lock);
    auto it = live->find (ptr);
    if (it != live->end ()) {
      l = it->second;
      live->erase (it);
    }
  }
  if (l.owner)
    l.owner->give_back (ptr, l.size);
  else if (ptr) /* a small block (raw_deallocate of the wrapped allocator's memory) */
    c10::GetDefaultCPUAllocator ()->raw_deleter () (ptr);
}

void
CpuBlockCache::give_back (void *ptr, std::size_t size)
{
  bool keep = false;
  {
    std::lock_guard<std::mutex> g (lock_);
    if (stats_.cached + size <= limit_) {
      free_.emplace (size, ptr);
      stats_.cached += size;
      keep = true;
    } else {
      stats_.released++;
    }
  }
  if (!keep)
    std::free (ptr);
}

CpuBlockCacheStats
CpuBlockCache::stats () const
{
  std::lock_guard<std::mutex> g (lock_);
  CpuBlockCacheStats s = stats_;
  s.limit = limit_;
  return s;
}

void
CpuBlockCache::trim ()
{
  std::multimap<std::size_t, void *> blocks;
  {
    std::lock_guard<std::mutex> g (lock_);
    blocks.swap (free_);
    stats_.cached = 0;
  }
  for (auto &kv : blocks)
    std::free (kv.second);
}

CpuBlockCache *
install_cpu_block_cache ()
{
  static CpuBlockCache *installed = [] () -> CpuBlockCache * {
    std::size_t mb = 1024;
    if (const char *env = std::getenv ("PI0_CPU_BLOCK_CACHE_MB")) {
      try {
        mb = std::stoul (env);
      } catch (const std::exception &) {
        mb = 1024;
      }
    }
    if (mb == 0)
      return nullptr;
    /* Never destroyed: tensors may outlive any static destructor, and their deleters point
     * here. Priority 1: above LibTorch's default CPU allocator (0). */
    auto *cache = new CpuBlockCache (c10::GetCPUAllocator (), mb << 20);
    c10::SetCPUAllocator (cache, 1);
    return cache;
  }();
  return installed;
}

} // namespace pi0
