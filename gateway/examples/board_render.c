#include "board_render.h"

/* Write s with HTML metacharacters escaped: runs of plain bytes go out in
 * one tgw_write, so the write pattern is a realistic mix of long and tiny
 * writes. */
static int esc(tgw_out *out, struct tgw_str s)
{
    size_t start = 0;
    for (size_t i = 0; i < s.n; i++) {
        const char *ent;
        switch (s.p[i]) {
        case '&': ent = "&amp;"; break;
        case '<': ent = "&lt;"; break;
        case '>': ent = "&gt;"; break;
        case '"': ent = "&quot;"; break;
        case '\'': ent = "&#39;"; break;
        default: continue;
        }
        if (tgw_write(out, s.p + start, i - start) || tgw_puts(out, ent))
            return -1;
        start = i + 1;
    }
    return tgw_write(out, s.p + start, s.n - start);
}

int board_render_page(tgw_out *out, const tgw_board *b, int page, enum board_style style)
{
    if (page < 1 || page > BOARD_PAGES)
        return -1;
    size_t count = tgw_board_count(b);
    size_t per = (count + BOARD_PAGES - 1) / BOARD_PAGES;
    size_t first = (size_t)(page - 1) * per + 1;
    size_t last = first + per - 1 < count ? first + per - 1 : count;

    tgw_printf(out,
               "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
               "<meta charset=\"utf-8\">\n"
               "<title>tern board &mdash; page %d of %d</title>\n",
               page, BOARD_PAGES);
    if (style == BOARD_SITE)
        tgw_puts(out,
                 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                 "<link rel=\"stylesheet\" href=\"/css/style.css\">\n"
                 "<link rel=\"icon\" href=\"/favicon.ico\">\n"
                 "</head>\n<body class=\"board\">\n"
                 "<p class=\"back\"><a href=\"/\">&larr; tern demo site</a></p>\n"
                 "<h1>tern bulletin board</h1>\n"
                 "<p class=\"lead\">Every page here is written by <code>board.cgi</code>, a C "
                 "program run once per request (CGI) and built on tern&rsquo;s "
                 "<code>gateway/</code> library. The posts are made-up sample data "
                 "read from <code>board-data.txt</code> beside the program.</p>\n"
                 "<p class=\"nav\">Pages:");
    else
        tgw_puts(out,
                 "<style>body{font-family:sans-serif;max-width:48em;margin:auto}"
                 ".post{border-top:1px solid #ccc;padding:.5em 0}"
                 ".meta{color:#666;font-size:small}</style>\n"
                 "</head>\n<body>\n<h1>tern bulletin board</h1>\n"
                 "<p class=\"nav\">Pages:");
    for (int p = 1; p <= BOARD_PAGES; p++)
        tgw_printf(out, p == page ? " <strong>%d</strong>"
                                  : " <a href=\"?page=%d\">%d</a>",
                   p, p);
    tgw_printf(out, "</p>\n<p>Posts %zu&ndash;%zu of %zu</p>\n", first, last,
               count);
    for (size_t n = first; n <= last; n++) {
        struct tgw_post post;
        if (tgw_board_get(b, n, &post))
            return -1;
        tgw_printf(out, "<div class=\"post\" id=\"p%zu\">\n<h2>#%zu ", n, n);
        esc(out, post.subject);
        tgw_puts(out, "</h2>\n<p class=\"meta\">by <span class=\"author\">");
        esc(out, post.author);
        tgw_puts(out, "</span> on <time>");
        esc(out, post.date);
        tgw_puts(out, "</time></p>\n<p>");
        esc(out, post.body);
        tgw_puts(out, "</p>\n</div>\n");
    }
    if (style == BOARD_SITE)
        tgw_puts(out, "<p class=\"back\"><a href=\"/\">&larr; back to the demo site</a></p>\n");
    /* The stream's errors are sticky: one check at the end sees them all. */
    return tgw_puts(out, "</body>\n</html>\n");
}
