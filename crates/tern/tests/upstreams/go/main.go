// Command upstream is the Go upstream of tern's reverse-proxy tests: a
// net/http server (standard library only) whose endpoints make what a proxy
// sent and relayed observable, and whose /raw endpoint answers with
// deliberately malformed bytes.
//
// It listens on -listen (else $UPSTREAM_LISTEN, else 127.0.0.1:0) and
// prints its port on stdout once it accepts connections, then a line
// "request METHOD /path" for each request it counts, as it arrives (so what
// a server received survives its being killed).
//
// Endpoints (any method unless said):
//
//	/echo[/...]          the request as JSON: method, path, query, uri, proto,
//	                     headers (lower-case name -> values, host and
//	                     transfer-encoding included), body_length, body_sha256
//	/bytes?n=N           N bytes of the pattern byte(i % 251), streamed in pieces
//	                     of piece=BYTES (default 65536), a pause of every=DURATION
//	                     after each; chunked=1 sends no Content-Length (chunked)
//	/sse?n=5&every=100ms server-sent events "id: i\ndata: event i\n\n", each flushed
//	/count               JSON {"METHOD /path": requests received} (itself not counted;
//	                     the path as received, percent-encoded)
//	/status/NNN          that status; a 1xx is sent as an interim response before 200
//	/raw?case=NAME       malformed bytes written on the raw connection, then closed
//	/upgrade             with Upgrade and Connection: upgrade, 101 then every byte
//	                     echoed until the client half-closes, which is propagated
//
// On every endpoint delay=DURATION waits before answering and each
// header=Name:Value adds a response field. A client that half-closes its
// connection counts as gone (net/http cancels the request's context), so
// it cuts a delay, a paced body or an event stream short.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rawCases are the malformed responses of /raw, by name.
var rawCases = map[string]string{
	"two-content-lengths":        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
	"content-length-and-chunked": "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"bad-chunk-size":             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
	"obs-fold":                   "HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 5\r\n\r\nhello",
	"nul-in-field":               "HTTP/1.1 200 OK\r\nX-Nul: a\x00b\r\nContent-Length: 5\r\n\r\nhello",
	"status-2000":                "HTTP/1.1 2000 OK\r\nContent-Length: 5\r\n\r\nhello",
	"cut-short":                  "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello",
}

var counts = struct {
	sync.Mutex
	m map[string]int
}{m: map[string]int{}}

func main() {
	listen := os.Getenv("UPSTREAM_LISTEN")
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	flag.StringVar(&listen, "listen", listen, "address to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", echo)
	mux.HandleFunc("/echo/", echo)
	mux.HandleFunc("/bytes", bytes)
	mux.HandleFunc("/sse", sse)
	mux.HandleFunc("/count", count)
	mux.HandleFunc("/status/", status)
	mux.HandleFunc("/raw", raw)
	mux.HandleFunc("/upgrade", upgrade)
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	log.Fatal(http.Serve(ln, common(mux)))
}

// common counts the request, then applies delay= and header=.
func common(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/count" {
			counts.Lock()
			counts.m[r.Method+" "+r.URL.EscapedPath()]++
			counts.Unlock()
			fmt.Printf("request %s %s\n", r.Method, r.URL.EscapedPath())
		}
		q := r.URL.Query()
		if !pause(r, duration(q.Get("delay"))) {
			return
		}
		for _, field := range q["header"] {
			if name, value, ok := strings.Cut(field, ":"); ok {
				w.Header().Add(name, strings.TrimSpace(value))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// pause waits d, or less if the client goes away (then false).
func pause(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		return false
	}
}

func duration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

func number(r *http.Request, name string, otherwise int) int {
	n, err := strconv.Atoi(r.URL.Query().Get(name))
	if err != nil {
		return otherwise
	}
	return n
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	encoder := json.NewEncoder(w)
	encoder.SetEscapeHTML(false)
	encoder.Encode(v)
}

func echo(w http.ResponseWriter, r *http.Request) {
	digest := sha256.New()
	n, err := io.Copy(digest, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// net/http moves Host and Transfer-Encoding out of Header: put them back.
	headers := map[string][]string{"host": {r.Host}}
	for name, values := range r.Header {
		headers[strings.ToLower(name)] = values
	}
	if len(r.TransferEncoding) > 0 {
		headers["transfer-encoding"] = r.TransferEncoding
	}
	writeJSON(w, map[string]any{
		"method":      r.Method,
		"path":        r.URL.EscapedPath(),
		"query":       r.URL.RawQuery,
		"uri":         r.RequestURI,
		"proto":       r.Proto,
		"headers":     headers,
		"body_length": n,
		"body_sha256": hex.EncodeToString(digest.Sum(nil)),
	})
}

func bytes(w http.ResponseWriter, r *http.Request) {
	n, piece, every := number(r, "n", 0), max(number(r, "piece", 65536), 1), duration(r.URL.Query().Get("every"))
	w.Header().Set("Content-Type", "application/octet-stream")
	if r.URL.Query().Get("chunked") != "1" {
		w.Header().Set("Content-Length", strconv.Itoa(n))
	}
	// The head goes out now: without a length that makes the body chunked,
	// and a slow body's head arrives at once.
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	buf := make([]byte, min(piece, n))
	for off := 0; off < n; {
		k := min(piece, n-off)
		for i := range buf[:k] {
			buf[i] = byte((off + i) % 251)
		}
		if _, err := w.Write(buf[:k]); err != nil {
			return
		}
		off += k
		if every > 0 {
			w.(http.Flusher).Flush()
			if !pause(r, every) {
				return
			}
		}
	}
}

func sse(w http.ResponseWriter, r *http.Request) {
	n, every := number(r, "n", 5), duration(r.URL.Query().Get("every"))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	for i := 1; i <= n; i++ {
		if i > 1 && !pause(r, every) {
			return
		}
		fmt.Fprintf(w, "id: %d\ndata: event %d\n\n", i, i)
		w.(http.Flusher).Flush()
	}
}

func count(w http.ResponseWriter, r *http.Request) {
	counts.Lock()
	defer counts.Unlock()
	writeJSON(w, counts.m)
}

func status(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
	if err != nil || code < 100 || code > 599 || code == http.StatusSwitchingProtocols {
		http.Error(w, "no such status", http.StatusBadRequest)
		return
	}
	if code < 200 {
		if code == http.StatusEarlyHints {
			w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		}
		w.WriteHeader(code)
		code = http.StatusOK
	}
	w.WriteHeader(code)
	if code != http.StatusNoContent && code != http.StatusNotModified {
		fmt.Fprintf(w, "status %d\n", code)
	}
}

func raw(w http.ResponseWriter, r *http.Request) {
	bytes, ok := rawCases[r.URL.Query().Get("case")]
	if !ok {
		names := make([]string, 0, len(rawCases))
		for name := range rawCases {
			names = append(names, name)
		}
		sort.Strings(names)
		http.Error(w, "cases: "+strings.Join(names, " "), http.StatusNotFound)
		return
	}
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	io.WriteString(conn, bytes)
}

func upgrade(w http.ResponseWriter, r *http.Request) {
	protocol := r.Header.Get("Upgrade")
	if protocol == "" || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
		w.Header().Set("Upgrade", "echo")
		w.Header().Set("Connection", "Upgrade")
		http.Error(w, "upgrade required", http.StatusUpgradeRequired)
		return
	}
	conn, rw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", protocol)
	// Bytes read past the head are the client's first; then the socket's.
	io.Copy(conn, rw.Reader)
	conn.(*net.TCPConn).CloseWrite()
	// The client closes its side in turn; wait for it, briefly.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, conn)
}
