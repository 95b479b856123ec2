/* The bulletin-board page generator, shared by board.cgi and gwbench. */
#ifndef BOARD_RENDER_H
#define BOARD_RENDER_H

#include "tern_gw.h"

#define BOARD_PAGES 5

/* How a page looks: BOARD_PLAIN is the benchmark's page (its own inline
 * style, nothing else: gwbench's bytes stay the same), BOARD_SITE the demo
 * site's (its stylesheet, icon, a way back and a word on what it is). */
enum board_style { BOARD_PLAIN, BOARD_SITE };

/* Write page 1..BOARD_PAGES of the board as an HTML document (no CGI
 * header), reading posts through the query interface.  0 or -1. */
int board_render_page(tgw_out *out, const tgw_board *b, int page, enum board_style style);

#endif
