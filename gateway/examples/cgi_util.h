/* Small helpers shared by the example CGI programs. */
#ifndef CGI_UTIL_H
#define CGI_UTIL_H

#include <stddef.h>

#include "tern_gw.h"

/* Find name=value in a QUERY_STRING and URL-decode the value into out
 * (NUL-terminated).  Returns the value's length; -1 if the parameter is
 * absent; -2 if it is badly encoded, decodes to a NUL byte, or does not fit
 * in outsz. */
int cgi_query_param(const char *qs, const char *name, char *out, size_t outsz);

/* Write a complete small error response: Status line, text/plain, message. */
int cgi_error(tgw_out *out, int status, const char *message);

/* Open stdout with the discipline chosen by $TGW_DISCIPLINE/$TGW_BUFSIZE.
 * If those are invalid, answer 500 on the raw fd, say why on stderr and
 * return NULL: a misconfigured gateway must not fall back silently. */
tgw_out *cgi_open_stdout(const char *prog);

/* The path rel relative to the program's own directory, so a copied site
 * keeps working: the directory of $SCRIPT_FILENAME (the program as the
 * server named it), else of /proc/self/exe.  0, or -1 if it does not fit
 * in outsz or no directory is known. */
int cgi_beside_self(const char *rel, char *out, size_t outsz);

#endif
