# shellcheck shell=bash
# tern, nginx and h2o serving a docroot over TLS on 127.0.0.1, configured
# alike wherever they are compared over HTTPS (bench/https.sh) and over
# HTTP/2 (bench/h2.sh): no access log, keep-alive without a request limit
# (nginx's default of 1,000 ends connections under load), TLS 1.2 and 1.3.
# Source it after common.sh; it defines functions only and reads the
# caller's MAXFDS.

# tern_tls_conf FILE STATUS_PORT PORT CERT KEY DOCROOT WORKERS [MORE]:
# writes FILE (tern_conf's, with a plain address on STATUS_PORT for
# /_tern/status) with a [tls] table on PORT; MORE goes last, in the [tls]
# table or after it.
tern_tls_conf() {
    tern_conf "$1" "$2" "$6" "$7" "[tls]
listen = [\"127.0.0.1:$3\"]
certificates = [{ cert = \"$4\", key = \"$5\" }]
${8:-}"
}

# nginx_tls_conf DIR PORT CERT KEY DOCROOT WORKERS RESUME(0|1) [FLAGS]:
# writes DIR/nginx.conf; RESUME turns the session cache and tickets on or
# off; FLAGS go on the listen line ("http2" in nginx 1.22).
nginx_tls_conf() {
    local dir=$1 port=$2 cert=$3 key=$4 root=$5 workers=$6 cache=shared:SSL:10m tickets=on flags=${8:-}
    (($7)) || cache=off tickets=off
    cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process on;
user root;
worker_processes $workers;
worker_rlimit_nofile $MAXFDS;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; use epoll; }
http {
    access_log off;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    open_file_cache max=1000 inactive=60s;
    server_tokens off;
    default_type application/octet-stream;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache $cache;
    ssl_session_tickets $tickets;
    server {
        listen 127.0.0.1:$port ssl${flags:+ $flags} backlog=4096 reuseport;
        ssl_certificate $cert;
        ssl_certificate_key $key;
        root $root;
    }
}
EOF
}

# h2o_tls_conf DIR PORT CERT KEY DOCROOT WORKERS RESUME(0|1): writes
# DIR/h2o.conf (h2o offers h2 by ALPN on every TLS address).
h2o_tls_conf() {
    local dir=$1 port=$2 cert=$3 key=$4 root=$5 workers=$6 mode=all
    (($7)) || mode=off
    cat >"$dir/h2o.conf" <<EOF
num-threads: $workers
max-connections: 4096
user: root
pid-file: $dir/h2o.pid
error-log: $dir/error.log
http1-request-timeout: 300
ssl-session-resumption:
  mode: $mode
listen:
  host: 127.0.0.1
  port: $port
  ssl:
    certificate-file: $cert
    key-file: $key
    minimum-version: TLSv1.2
hosts:
  default:
    paths:
      /:
        file.dir: $root
EOF
}
