/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The robot's action port, shared by the lock-step loop (pi0simloop.cpp, on loopback) and the
 * robot's end across a network (pi0simremote.cpp): a UDP socket bound to an address and port
 * (0: the kernel chooses); FEEDBACK goes back to the address the last frame came from (the
 * sender reads it on its sending socket). */
#pragma once

#include <glib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace pi0::tools::sim
{

class ActionSocket
{
public:
  ActionSocket () = default;
  ActionSocket (const ActionSocket &) = delete;
  ActionSocket &operator= (const ActionSocket &) = delete;
  ~ActionSocket ()
  {
    if (fd_ >= 0)
      close (fd_);
  }

  bool open (const std::string &address, int port, std::string *error)
  {
    fd_ = socket (AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons ((uint16_t)port);
    socklen_t len = sizeof a;
    const bool ipv4 = inet_pton (AF_INET, address.c_str (), &a.sin_addr) == 1;
    if (fd_ < 0 || !ipv4 || bind (fd_, (sockaddr *)&a, sizeof a) != 0 ||
        getsockname (fd_, (sockaddr *)&a, &len) != 0) {
      *error = "cannot bind the action port " + address + ":" + std::to_string (port) + ": " +
               (fd_ >= 0 && !ipv4 ? "not an IPv4 address" : g_strerror (errno));
      return false;
    }
    port_ = ntohs (a.sin_port);
    return true;
  }
  int port () const { return port_; }

  /* One datagram within @timeout_ms (0: only one already there), or false. */
  bool receive (int timeout_ms, std::vector<uint8_t> *out)
  {
    pollfd p{fd_, POLLIN, 0};
    if (poll (&p, 1, std::max (0, timeout_ms)) <= 0)
      return false;
    out->resize (65536);
    peer_len_ = sizeof peer_;
    const ssize_t n = recvfrom (fd_, out->data (), out->size (), 0, (sockaddr *)&peer_, &peer_len_);
    if (n < 0)
      return false;
    out->resize ((size_t)n);
    have_peer_ = true;
    return true;
  }
  void send_back (const std::vector<uint8_t> &data)
  {
    if (have_peer_)
      (void)sendto (fd_, data.data (), data.size (), MSG_DONTWAIT, (sockaddr *)&peer_, peer_len_);
  }

private:
  int fd_ = -1, port_ = 0;
  sockaddr_in peer_{};
  socklen_t peer_len_ = 0;
  bool have_peer_ = false;
};

} // namespace pi0::tools::sim
