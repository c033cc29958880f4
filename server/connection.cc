#include "connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace kvshare::server {
namespace {

// Numeric host and port of a socket address (IPv4 or IPv6).
bool HostPort(const sockaddr_storage& a, std::string& host, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf) == nullptr) return false;
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf) == nullptr) return false;
    port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  host = buf;
  return true;
}

}  // namespace

int FindConnectionSocket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                         int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    std::string ph, sh;
    int pp = 0, sp = 0;
    if (!HostPort(peer, ph, pp) || !HostPort(self, sh, sp)) continue;
    if (pp == remote_port && sp == local_port && ph == remote_addr && (local_addr.empty() || sh == local_addr)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0;
  }
  return false;
}

bool SetListenBacklog(int fd, int backlog) { return fd >= 0 && ::listen(fd, backlog) == 0; }

}  // namespace kvshare::server
