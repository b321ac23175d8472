"""`vpncrypt proxy`: WireGuard for an ordinary user, with no TUN and no capability.

The kernel's own TCP/IP stack serves the proxied connections from a network
namespace inside a user namespace the user owns (namespace.py); the engine
reaches that stack through an AF_PACKET socket on one end of a veth pair
(packet_link.py) instead of a TUN.  The proxy's front ends, made in the host's
namespace before the unshare, read wireproxy's config (settings.py): SOCKS5
(socks5.py, with UDP ASSOCIATE in udp_associate.py), HTTP CONNECT and
absolute-URI requests (http_proxy.py) and TCP forwards (forwards.py), each
connection dialled inside the namespace (dialer.py); what must be in the
host's namespace after the unshare comes from a helper forked before it
(host_connector.py).  service.py runs it all."""
