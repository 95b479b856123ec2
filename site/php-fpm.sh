#!/bin/sh
# Runs php-fpm in the foreground for the demo site's PHP pages (site/php/),
# with a private configuration and the Unix socket site/tern.toml names; no
# system service. Ctrl-C stops it. Needs Debian's php-fpm package.
set -eu
fpm=$(ls /usr/sbin/php-fpm* 2>/dev/null | sort | tail -n 1)
[ -n "$fpm" ] || { echo "php-fpm is not installed (apt-get install php-fpm)" >&2; exit 1; }
conf=/tmp/tern-demo-php-fpm.conf
cat >"$conf" <<CONF
[global]
error_log = /dev/stderr
daemonize = no
pid = /tmp/tern-demo-php-fpm.pid
[demo]
listen = /tmp/tern-demo-php-fpm.sock
pm = static
pm.max_children = 4
php_admin_value[output_buffering] = 0
php_admin_value[display_errors] = Off
CONF
root=
[ "$(id -u)" = 0 ] && root=-R
echo "php-fpm for the demo site on /tmp/tern-demo-php-fpm.sock (Ctrl-C stops it)" >&2
exec "$fpm" -y "$conf" -F $root
