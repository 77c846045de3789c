#!/usr/bin/env python3
"""Static HTTP server for the fixtures namespace: serves DIR (the pacman mirror at its top level,
plus whatever other fixtures put beside it, e.g. releases/) on ADDR:PORT. Run only inside the
fixtures network namespace (hostctl.py does), never in the CI machine's own namespace.

A folder's listing is the page nginx's ``autoindex`` writes, as archive.archlinux.org serves it
(``<a href="NAME">NAME</a>``, padded, ``DD-Mon-YYYY HH:MM``, the size; folders with a trailing ``/``):
``rigkit lock`` reads the archive's package listings for their files and dates
(:func:`rigkit.lockfile.archive.parse_listing`).
usage: fixtures_server.py DIR ADDR PORT LOGFILE"""
import functools, html, http.server, io, os, sys, time, urllib.parse


def autoindex(path: str, url_path: str) -> bytes:
    """nginx autoindex's page for the folder ``path`` (ngx_http_autoindex_module.c, html format: the
    name cut at 50 columns, the date as ``%d-%b-%Y %H:%M`` in UTC, the size in bytes, ``-`` for folders)."""
    title = html.escape(urllib.parse.unquote(url_path))
    rows = ['<a href="../">../</a>']
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        st = os.stat(full)
        is_dir = os.path.isdir(full)
        shown = name + ("/" if is_dir else "")
        cut = shown if len(shown) <= 50 else shown[:47] + "..>"
        date = time.strftime("%d-%b-%Y %H:%M", time.gmtime(st.st_mtime))
        size = "-" if is_dir else str(st.st_size)
        rows.append(f'<a href="{urllib.parse.quote(shown)}">{html.escape(cut)}</a>{" " * (51 - len(cut))}{date} {size:>19}')
    body = (f"<html>\r\n<head><title>Index of {title}</title></head>\r\n<body>\r\n<h1>Index of {title}</h1><hr><pre>"
            + "\r\n".join(rows) + "\r\n</pre><hr></body>\r\n</html>\r\n")
    return body.encode()


if __name__ == "__main__":
    root, addr, port, logfile = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    log = open(logfile, "a", buffering=1)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, fmt, *args):
            log.write("%s %s\n" % (self.address_string(), fmt % args))

        def list_directory(self, path):
            data = autoindex(path, self.path.split("?", 1)[0])
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return io.BytesIO(data)

    srv = http.server.ThreadingHTTPServer((addr, port), functools.partial(Handler, directory=root))
    srv.daemon_threads = True
    srv.serve_forever()
