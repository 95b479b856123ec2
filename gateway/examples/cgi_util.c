#include "cgi_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int cgi_query_param(const char *qs, const char *name, char *out, size_t outsz)
{
    size_t nlen = strlen(name);
    for (const char *p = qs; p && *p;) {
        if (strncmp(p, name, nlen) != 0 || p[nlen] != '=') {
            p = strchr(p, '&');
            p = p ? p + 1 : NULL;
            continue;
        }
        size_t n = 0;
        for (p += nlen + 1; *p && *p != '&'; p++) {
            int c = (unsigned char)*p;
            if (c == '+') {
                c = ' ';
            } else if (c == '%') {
                int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
                if (lo < 0)
                    return -2;
                c = hi * 16 + lo;
                p += 2;
            }
            if (c == 0 || n + 1 >= outsz)
                return -2;
            out[n++] = (char)c;
        }
        out[n] = '\0';
        return (int)n;
    }
    return -1;
}

static const char *reason(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    default: return "Internal Server Error";
    }
}

int cgi_error(tgw_out *out, int status, const char *message)
{
    return tgw_printf(out, "Status: %d %s\nContent-Type: text/plain\n\n%s\n",
                      status, reason(status), message) < 0 ? -1 : 0;
}

tgw_out *cgi_open_stdout(const char *prog)
{
    tgw_out *out = tgw_open_env(STDOUT_FILENO);
    if (!out) {
        fprintf(stderr, "%s: TGW_DISCIPLINE/TGW_BUFSIZE: %s\n", prog,
                strerror(errno));
        dprintf(STDOUT_FILENO, "Status: 500 Internal Server Error\n"
                               "Content-Type: text/plain\n\n"
                               "gateway misconfigured\n");
    }
    return out;
}

int cgi_beside_self(const char *rel, char *out, size_t outsz)
{
    char self[4096];
    const char *script = getenv("SCRIPT_FILENAME");
    if (script && *script) {
        if (strlen(script) >= sizeof self)
            return -1;
        strcpy(self, script);
    } else {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return -1;
        self[n] = '\0';
    }
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    int n = snprintf(out, outsz, "%s/%s", self[0] ? self : "", rel);
    return n < 0 || (size_t)n >= outsz ? -1 : 0;
}
