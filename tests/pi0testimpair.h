/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A user-space stand-in for tc netem where the kernel lacks it: UDP relays that delay each
 * datagram by a fixed time plus uniform jitter and drop a share of them, both ways, seeded. Each
 * way of each flow draws its losses from a generator of its own: its k-th datagram is lost or
 * not by the seed alone, whatever the other flows carried and however they interleaved.
 *
 * Each Flow listens on one address; a datagram from a client there goes out of the flow's own
 * upstream socket to the target, and what the target answers to that socket goes back to the
 * client (the last one heard): a robot's FEEDBACK finds its way back to the sink. */
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace pi0test
{

class UdpImpairment
{
public:
  struct Settings {
    double delay_ms = 20, jitter_ms = 5; /* each datagram: delay + uniform [-jitter, jitter] */
    double loss = 0.01;                  /* share dropped */
    uint32_t seed = 1;
  };

  /* kUp: from a flow's client to its target; kDown: the target's answers back. */
  enum Way { kUp = 0, kDown = 1 };

  explicit UdpImpairment (const Settings &s) : s_ (s), rng_ (s.seed) {}
  ~UdpImpairment () { stop (); }

  /* Adds a relay from @listen_ip:@listen_port to @target_ip:@target_port, its upstream socket
   * bound on @upstream_ip (the address the target sees). False if a socket cannot be made. */
  bool add (const std::string &listen_ip, int listen_port, const std::string &upstream_ip,
            const std::string &target_ip, int target_port, std::string *error)
  {
    Flow f;
    f.listen = bound (listen_ip, listen_port, error);
    f.upstream = bound (upstream_ip, 0, error);
    if (f.listen < 0 || f.upstream < 0)
      return false;
    f.target = address (target_ip, target_port);
    for (int w : {kUp, kDown})
      f.lose[w].seed ((uint32_t)(s_.seed * 1000003u + 2 * flows_.size () + w));
    flows_.push_back (f);
    return true;
  }
  void start ()
  {
    running_ = true;
    thread_ = std::thread ([this] { loop (); });
  }
  void stop ()
  {
    running_ = false;
    if (thread_.joinable ())
      thread_.join ();
    for (Flow &f : flows_) {
      close (f.listen);
      close (f.upstream);
    }
    flows_.clear ();
  }
  uint64_t forwarded () const { return forwarded_[kUp] + forwarded_[kDown]; }
  uint64_t dropped () const { return dropped_[kUp] + dropped_[kDown]; }
  uint64_t forwarded (Way w) const { return forwarded_[w]; }
  uint64_t dropped (Way w) const { return dropped_[w]; }

private:
  struct Flow {
    int listen = -1, upstream = -1;
    sockaddr_in target{}, client{};
    bool have_client = false;
    std::mt19937 lose[2]; /* per way: which datagrams are lost */
  };
  struct Pending {
    std::chrono::steady_clock::time_point at;
    uint64_t order;
    int fd;
    Way way;
    sockaddr_in to;
    std::vector<char> bytes;
    bool operator> (const Pending &o) const { return at != o.at ? at > o.at : order > o.order; }
  };

  static sockaddr_in address (const std::string &ip, int port)
  {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons ((uint16_t)port);
    inet_pton (AF_INET, ip.c_str (), &a.sin_addr);
    return a;
  }
  static int bound (const std::string &ip, int port, std::string *error)
  {
    const int fd = socket (AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a = address (ip, port);
    if (fd < 0 || bind (fd, (sockaddr *)&a, sizeof a) != 0) {
      *error = "cannot bind " + ip + ":" + std::to_string (port);
      if (fd >= 0)
        close (fd);
      return -1;
    }
    return fd;
  }
  /* One datagram of @f going @way out of @fd: dropped, or queued for @to after the delay. */
  void take (Flow &f, Way way, int fd, const sockaddr_in &to, std::vector<char> bytes)
  {
    std::uniform_real_distribution<double> u (0, 1);
    if (u (f.lose[way]) < s_.loss) {
      dropped_[way]++;
      return;
    }
    const double ms = s_.delay_ms + (2 * u (rng_) - 1) * s_.jitter_ms;
    queue_.push ({std::chrono::steady_clock::now () +
                      std::chrono::microseconds ((int64_t)(std::max (0.0, ms) * 1000)),
                  order_++, fd, way, to, std::move (bytes)});
  }
  void loop ()
  {
    std::vector<pollfd> fds;
    for (Flow &f : flows_) {
      fds.push_back ({f.listen, POLLIN, 0});
      fds.push_back ({f.upstream, POLLIN, 0});
    }
    std::vector<char> buf (65536);
    while (running_) {
      poll (fds.data (), fds.size (), 1);
      for (size_t i = 0; i < flows_.size (); i++) {
        Flow &f = flows_[i];
        sockaddr_in from{};
        socklen_t len = sizeof from;
        ssize_t n;
        while ((n = recvfrom (f.listen, buf.data (), buf.size (), 0, (sockaddr *)&from, &len)) >=
               0) {
          f.client = from;
          f.have_client = true;
          take (f, kUp, f.upstream, f.target, std::vector<char> (buf.begin (), buf.begin () + n));
          len = sizeof from;
        }
        while ((n = recvfrom (f.upstream, buf.data (), buf.size (), 0, (sockaddr *)&from, &len)) >=
               0) {
          if (f.have_client)
            take (f, kDown, f.listen, f.client, std::vector<char> (buf.begin (), buf.begin () + n));
          len = sizeof from;
        }
      }
      const auto now = std::chrono::steady_clock::now ();
      while (!queue_.empty () && queue_.top ().at <= now) {
        const Pending &p = queue_.top ();
        if (sendto (p.fd, p.bytes.data (), p.bytes.size (), 0, (const sockaddr *)&p.to,
                    sizeof p.to) >= 0)
          forwarded_[p.way]++;
        queue_.pop ();
      }
    }
  }

  Settings s_;
  std::mt19937 rng_;
  std::vector<Flow> flows_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> queue_;
  uint64_t order_ = 0;
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> forwarded_[2] = {{0}, {0}}, dropped_[2] = {{0}, {0}};
  std::thread thread_;
};

} // namespace pi0test
