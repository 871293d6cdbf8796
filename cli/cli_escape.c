/* cli_escape.c — make untrusted text (cell and model names read from a
 * capture, library error messages that quote them, user arguments) safe to
 * print on a terminal. Written once; every place the CLI prints such text
 * goes through cli_esc().
 *
 * Escaped: C0 controls (0x00-0x1f), DEL (0x7f) and the backslash, as \xNN
 * (backslash as \\, so the escaped form is unambiguous); bytes that are not
 * part of a well-formed UTF-8 sequence, as \xNN (a lone 0x9b is CSI on an
 * 8-bit terminal); and the UTF-8 encoded C1 controls U+0080..U+009F, as
 * \u00NN. Well-formed UTF-8 text is printed as is. */
#include "cli.h"

#include <string.h>

/* Length of the well-formed UTF-8 sequence at s (1..4), or 0. */
static size_t utf8_len(const unsigned char *s)
{
    const unsigned char c = s[0];
    size_t n;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1fu;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0fu;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07u;
    } else {
        return 0;
    }
    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xc0u) != 0x80u) /* also stops at the terminating NUL */
            return 0;
        cp = (cp << 6) | (s[k] & 0x3fu);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0; /* overlong, out of range, or a surrogate */
    return n;
}

const char *cli_esc(const char *in, char *out, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (!out || len == 0)
        return "";
    if (!in)
        in = "(null)";
    const unsigned char *s = (const unsigned char *)in;
    while (*s) {
        char tmp[8];
        size_t w = 0, adv = 1;
        const unsigned char c = *s;
        if (c == '\\') {
            tmp[w++] = '\\';
            tmp[w++] = '\\';
        } else if (c < 0x20 || c == 0x7f) {
            tmp[w++] = '\\';
            tmp[w++] = 'x';
            tmp[w++] = hex[c >> 4];
            tmp[w++] = hex[c & 15];
        } else if (c < 0x80) {
            tmp[w++] = (char)c;
        } else {
            const size_t n = utf8_len(s);
            if (n == 0) {
                tmp[w++] = '\\';
                tmp[w++] = 'x';
                tmp[w++] = hex[c >> 4];
                tmp[w++] = hex[c & 15];
            } else if (n == 2 && c == 0xc2 && s[1] < 0xa0) {
                tmp[w++] = '\\'; /* C1 control U+0080..U+009F */
                tmp[w++] = 'u';
                tmp[w++] = '0';
                tmp[w++] = '0';
                tmp[w++] = hex[s[1] >> 4];
                tmp[w++] = hex[s[1] & 15];
                adv = 2;
            } else {
                memcpy(tmp, s, n);
                w = n;
                adv = n;
            }
        }
        if (o + w + 4 >= len) { /* room for "..." and the NUL */
            if (o + 3 < len) {
                memcpy(out + o, "...", 3);
                o += 3;
            }
            break;
        }
        memcpy(out + o, tmp, w);
        o += w;
        s += adv;
    }
    out[o] = '\0';
    return out;
}
