"""A small Python CGI: what the server told this program about the request."""
import html
import os
import sys

names = ["REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "REMOTE_ADDR",
         "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "SERVER_SOFTWARE", "HTTP_USER_AGENT"]
rows = "\n".join(
    f"<tr><th>{n}</th><td>{html.escape(os.environ.get(n, '(unset)'))}</td></tr>" for n in names)
body = sys.stdin.read(int(os.environ.get("CONTENT_LENGTH") or 0))
sys.stdout.write("Content-Type: text/html; charset=utf-8\n\n")
sys.stdout.write(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>info.py — tern demo</title>
<link rel="stylesheet" href="/css/style.css"><link rel="icon" href="/favicon.ico"></head>
<body><main><p class="back"><a href="/">&larr; tern demo site</a></p>
<h1>What a CGI program is told</h1>
<p class="lead">This page is written by <code>info.py</code>, a Python program the server starts for
each request. It gets the request through environment variables (RFC 3875); here are some of them.</p>
<table>
{rows}
</table>
<p>Request body: {len(body)} bytes.</p>
<form method="post" action="/cgi-bin/info.py/some/path/info?from=form"><input name="q" value="hello">
<button>POST it</button></form>
<p><a href="/">Back</a></p></main></body></html>
""")
