/*
 * hello.cgi — a small C CGI answering about 5 KB of HTML, for comparing how
 * servers run CGI programs.  The output is the same on every run (no
 * clock, no environment echo) so it can be checked byte for byte.
 *   TGW_DISCIPLINE, TGW_BUFSIZE   output discipline 1-6 and buffer size
 */
#include "cgi_util.h"

static const char *const lines[] = {
    "The Common Gateway Interface runs one process per request.",
    "Its output goes through a pipe to the server, then to the client.",
    "How the program buffers that output changes how much CPU it uses.",
    "This page is a fixed size so that servers can be compared fairly.",
};

int main(void)
{
    tgw_out *out = cgi_open_stdout("hello.cgi");
    if (!out)
        return 1;
    tgw_puts(out, "Content-Type: text/html; charset=utf-8\n\n"
                  "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
                  "<meta charset=\"utf-8\">\n<title>Hello from tern</title>\n"
                  "</head>\n<body>\n<h1>Hello, world</h1>\n");
    for (int i = 1; i <= 34; i++)
        tgw_printf(out, "<p id=\"l%02d\">%s %s</p>\n", i,
                   lines[i % 4], lines[(i + 1) % 4]);
    tgw_puts(out, "</body>\n</html>\n");
    return tgw_close(out) ? 1 : 0;
}
