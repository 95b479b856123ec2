// The Node upstream of tern's reverse-proxy tests: node's own `http` module
// and nothing else, with the Go upstream's echo, bytes, sse and count
// endpoints (same parameters, same JSON; see ../go/main.go).
//
// Listens on 127.0.0.1:PORT (the first argument, else $UPSTREAM_PORT, else
// an ephemeral port) and prints its port on stdout once it accepts
// connections.
'use strict';

const crypto = require('node:crypto');
const http = require('node:http');

const counts = {};

/** The request as JSON, the body hashed as it streams. */
function echo(req, res, url) {
  const digest = crypto.createHash('sha256');
  let length = 0;
  req.on('data', (piece) => {
    digest.update(piece);
    length += piece.length;
  });
  req.on('end', () => {
    const headers = {};
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const name = req.rawHeaders[i].toLowerCase();
      (headers[name] ||= []).push(req.rawHeaders[i + 1]);
    }
    json(res, {
      method: req.method,
      path: url.pathname,
      query: url.search.slice(1),
      uri: req.url,
      proto: `HTTP/${req.httpVersion}`,
      headers,
      body_length: length,
      body_sha256: digest.digest('hex'),
    });
  });
}

/** n bytes of the pattern byte(i % 251), written as the socket drains. */
function bytes(req, res, url) {
  const n = number(url, 'n', 0);
  const piece = Math.max(number(url, 'piece', 65536), 1);
  const headers = { 'Content-Type': 'application/octet-stream' };
  if (url.searchParams.get('chunked') !== '1') headers['Content-Length'] = n;
  res.writeHead(200, headers);
  // The head goes out now: without a length that makes the body chunked.
  res.flushHeaders();
  let off = 0;
  const more = () => {
    while (off < n) {
      const k = Math.min(piece, n - off);
      const buf = Buffer.allocUnsafe(k);
      for (let i = 0; i < k; i++) buf[i] = (off + i) % 251;
      off += k;
      if (!res.write(buf)) return res.once('drain', more);
    }
    res.end();
  };
  more();
}

function sse(req, res, url) {
  const n = number(url, 'n', 5);
  const every = duration(url.searchParams.get('every'));
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
  let i = 0;
  const send = () => {
    i += 1;
    res.write(`id: ${i}\ndata: event ${i}\n\n`);
    if (i < n) timer = setTimeout(send, every);
    else res.end();
  };
  let timer = null;
  res.on('close', () => clearTimeout(timer));
  send();
}

function number(url, name, otherwise) {
  const n = parseInt(url.searchParams.get(name), 10);
  return Number.isNaN(n) ? otherwise : n;
}

/** "100ms", "2s" or a number of milliseconds. */
function duration(text) {
  const m = /^(\d+(?:\.\d+)?)(ms|s)?$/.exec(text || '');
  if (!m) return 0;
  return parseFloat(m[1]) * (m[2] === 's' ? 1000 : 1);
}

function json(res, value) {
  const body = JSON.stringify(value);
  res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://upstream');
  if (url.pathname !== '/count') {
    const key = `${req.method} ${url.pathname}`;
    counts[key] = (counts[key] || 0) + 1;
  }
  if (url.pathname === '/echo' || url.pathname.startsWith('/echo/')) return echo(req, res, url);
  if (url.pathname === '/bytes') return bytes(req, res, url);
  if (url.pathname === '/sse') return sse(req, res, url);
  if (url.pathname === '/count') return json(res, counts);
  res.writeHead(404, { 'Content-Type': 'text/plain' });
  res.end('not found\n');
});
// No idle or request timeouts of its own: the proxy's are under test.
server.keepAliveTimeout = 0;
server.requestTimeout = 0;

const port = parseInt(process.argv[2] || process.env.UPSTREAM_PORT || '0', 10);
server.listen(port, '127.0.0.1', () => console.log(server.address().port));
