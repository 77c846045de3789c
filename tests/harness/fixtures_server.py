#!/usr/bin/env python3
"""Static HTTP server for the fixtures namespace: serves DIR (the pacman mirror at its top level,
plus whatever other fixtures put beside it, e.g. releases/) on ADDR:PORT. Run only inside the
fixtures network namespace (hostctl.py does), never in the CI machine's own namespace.
usage: fixtures_server.py DIR ADDR PORT LOGFILE"""
import functools, http.server, sys

root, addr, port, logfile = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
log = open(logfile, "a", buffering=1)


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        log.write("%s %s\n" % (self.address_string(), fmt % args))


srv = http.server.ThreadingHTTPServer((addr, port), functools.partial(Handler, directory=root))
srv.daemon_threads = True
srv.serve_forever()
