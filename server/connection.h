// Socket-level helpers the HTTP layer needs and cpp-httplib 0.11 does not
// offer: the connection socket of a request (to notice a client that went
// away while its request is computed: 0.11 has no is_connection_closed), and
// a larger listen backlog than the library's fixed 5. Linux only.
#pragma once

#include <string>

namespace kvshare::server {

// The open socket whose local and peer addresses are these (scans
// /proc/self/fd), or -1. The socket stays owned by the HTTP library.
int FindConnectionSocket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                         int remote_port);

// True when the peer closed its side (or the connection broke). Data the peer
// sent (a pipelined request) does not count. Never blocks.
bool PeerClosed(int fd);

// listen() again with a longer accept queue (Linux updates the backlog of a
// listening socket). Returns false when that fails.
bool SetListenBacklog(int fd, int backlog);

}  // namespace kvshare::server
