/* Backtracking regex engine for the pre-tokenizers (see regex.h for the dialect).
 *
 * A pattern is parsed into a small syntax tree and compiled into a program for a
 * backtracking machine: CHAR/CLASS/ANY consume one symbol, SPLIT x y tries x and
 * remembers y for backtracking, LOOK runs a sub-program at the current position. The
 * machine explores alternatives depth-first in priority order and stops at the first
 * MATCH, which is exactly the ECMAScript rule. The backtrack stack is explicit (a
 * long run of letters under \p{L}+ pushes one entry per letter), so no recursion
 * depth depends on the text; only lookaheads recurse, once per nesting level. */
#include "regex.h"

#include <stdlib.h>
#include <string.h>

#include "unicode.h"
#include "util.h"

/* ---------------------------------------------------------------------------
 * Symbol classes */

/* Collapsed-text bytes standing for non-ASCII code points of each category
 * (llama.cpp's choice; ASCII never uses them). */
enum {
    SYM_OTHER = 0xD0,
    SYM_NUMBER = 0xD1,
    SYM_LETTER = 0xD2,
    SYM_PUNCT = 0xD3,
    SYM_MARK = 0xD4,
    SYM_SYMBOL = 0xD5,
    SYM_SPACE = 0x0B, /* non-ASCII whitespace, in both modes */
};

uint32_t ql_regex_collapse(uint32_t cpt)
{
    if (cpt < 0x80)
        return cpt;
    unsigned f = ql_unicode_flags(cpt);
    if (f & QL_UNI_WHITESPACE)
        return SYM_SPACE;
    if (f & QL_UNI_NUMBER)
        return SYM_NUMBER;
    if (f & QL_UNI_LETTER)
        return SYM_LETTER;
    if (f & QL_UNI_PUNCT)
        return SYM_PUNCT;
    if (f & QL_UNI_MARK)
        return SYM_MARK;
    if (f & QL_UNI_SYMBOL)
        return SYM_SYMBOL;
    return SYM_OTHER;
}

uint32_t ql_regex_widen(uint32_t cpt)
{
    if (cpt >= 0x80 && (ql_unicode_flags(cpt) & QL_UNI_WHITESPACE))
        return SYM_SPACE;
    return cpt;
}

typedef struct {
    uint32_t lo, hi; /* inclusive */
} range;

typedef struct {
    range *r; /* sorted, disjoint, non-adjacent after finish_class() */
    size_t n, cap;
} symclass;

static bool class_add(symclass *c, uint32_t lo, uint32_t hi)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 8;
        range *r = realloc(c->r, cap * sizeof *r);
        if (!r)
            return false;
        c->r = r;
        c->cap = cap;
    }
    c->r[c->n].lo = lo;
    c->r[c->n].hi = hi;
    c->n++;
    return true;
}

static int range_cmp(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges the ranges; with negate, replaces them by their complement over
 * all uint32 symbols. */
static bool finish_class(symclass *c, bool negate)
{
    if (c->n) {
        qsort(c->r, c->n, sizeof *c->r, range_cmp);
        size_t m = 0;
        for (size_t i = 1; i < c->n; i++) {
            if (c->r[i].lo <= c->r[m].hi ||
                (c->r[m].hi != UINT32_MAX && c->r[i].lo == c->r[m].hi + 1)) {
                if (c->r[i].hi > c->r[m].hi)
                    c->r[m].hi = c->r[i].hi;
            } else {
                c->r[++m] = c->r[i];
            }
        }
        c->n = m + 1;
    }
    if (!negate)
        return true;
    symclass inv = {0};
    uint32_t next = 0;
    bool done = false;
    for (size_t i = 0; i < c->n && !done; i++) {
        if (c->r[i].lo > next && !class_add(&inv, next, c->r[i].lo - 1))
            goto oom;
        if (c->r[i].hi == UINT32_MAX)
            done = true;
        else
            next = c->r[i].hi + 1;
    }
    if (!done && !class_add(&inv, next, UINT32_MAX))
        goto oom;
    free(c->r);
    *c = inv;
    return true;
oom:
    free(inv.r);
    return false;
}

static bool class_has(const symclass *c, uint32_t s)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s < c->r[mid].lo)
            hi = mid;
        else if (s > c->r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* ---------------------------------------------------------------------------
 * Syntax tree and program */

enum { N_EMPTY, N_CHAR, N_CLASS, N_ANY, N_BOL, N_EOL, N_CAT, N_ALT, N_REP, N_LOOK };
#define REP_INF   (-1)
#define REP_LIMIT 1000 /* largest {n,m} bound accepted; the patterns use at most 3 */

typedef struct {
    int kind;
    uint32_t c;   /* N_CHAR: the symbol; N_CLASS: class index */
    int a, b;     /* children: CAT/ALT both, REP/LOOK a */
    int min, max; /* N_REP */
    bool greedy;  /* N_REP */
    bool neg;     /* N_LOOK */
} node;

enum { I_CHAR, I_CLASS, I_ANY, I_SPLIT, I_JMP, I_LOOK, I_BOL, I_EOL, I_MATCH };

typedef struct {
    uint8_t op;
    uint8_t neg;  /* I_LOOK: negative lookahead */
    int32_t x, y; /* I_CHAR symbol, I_CLASS index, I_SPLIT/I_JMP/I_LOOK targets */
} inst;

struct ql_regex {
    char *pattern;
    bool collapsed;
    inst *prog;
    size_t n_prog, cap_prog;
    symclass *classes;
    size_t n_classes, cap_classes;
};

typedef struct {
    uint32_t *p; /* pattern as code points */
    size_t n, i;
    node *nodes;
    size_t n_nodes, cap_nodes;
    ql_regex *re;
    ql_error *err;
    ql_status st;
} parser;

static int fail(parser *ps, ql_status st, const char *what)
{
    if (ps->st == QL_OK)
        ql_error_set(ps->err, st, "regex '%s': %s at character %zu", ps->re->pattern, what, ps->i);
    ps->st = st;
    return -1;
}

static int new_node(parser *ps, int kind)
{
    if (ps->n_nodes == ps->cap_nodes) {
        size_t cap = ps->cap_nodes ? 2 * ps->cap_nodes : 64;
        node *nn = realloc(ps->nodes, cap * sizeof *nn);
        if (!nn)
            return fail(ps, QL_ENOMEM, "out of memory");
        ps->nodes = nn;
        ps->cap_nodes = cap;
    }
    node *nd = &ps->nodes[ps->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    nd->a = nd->b = -1;
    return (int)ps->n_nodes++;
}

static int new_class(parser *ps)
{
    ql_regex *re = ps->re;
    if (re->n_classes == re->cap_classes) {
        size_t cap = re->cap_classes ? 2 * re->cap_classes : 8;
        symclass *c = realloc(re->classes, cap * sizeof *c);
        if (!c)
            return fail(ps, QL_ENOMEM, "out of memory");
        re->classes = c;
        re->cap_classes = cap;
    }
    memset(&re->classes[re->n_classes], 0, sizeof(symclass));
    return (int)re->n_classes++;
}

static bool at(const parser *ps, uint32_t c)
{
    return ps->i < ps->n && ps->p[ps->i] == c;
}

/* Adds the ranges of a class escape (\s \d \w, or a category in collapsed mode) to
 * c; negated forms add the complement. Returns false on error. */
static bool add_escape_class(parser *ps, symclass *c, char kind, bool negate)
{
    symclass tmp = {0};
    bool ok = true;
    switch (kind) {
    case 's':
        ok = class_add(&tmp, 0x09, 0x0D) && class_add(&tmp, 0x20, 0x20);
        break;
    case 'd':
        ok = class_add(&tmp, '0', '9');
        break;
    case 'w':
        ok = class_add(&tmp, '0', '9') && class_add(&tmp, 'A', 'Z') && class_add(&tmp, '_', '_') &&
             class_add(&tmp, 'a', 'z');
        break;
    case 'N':
        ok = class_add(&tmp, SYM_NUMBER, SYM_NUMBER) && class_add(&tmp, '0', '9');
        break;
    case 'L':
        ok = class_add(&tmp, SYM_LETTER, SYM_LETTER) && class_add(&tmp, 'A', 'Z') &&
             class_add(&tmp, 'a', 'z');
        break;
    case 'P': /* ASCII punctuation: !"# %&'()* ,-./ :; ?@ [\] _ { } */
        ok = class_add(&tmp, SYM_PUNCT, SYM_PUNCT) && class_add(&tmp, 0x21, 0x23) &&
             class_add(&tmp, 0x25, 0x2A) && class_add(&tmp, 0x2C, 0x2F) &&
             class_add(&tmp, 0x3A, 0x3B) && class_add(&tmp, 0x3F, 0x40) &&
             class_add(&tmp, 0x5B, 0x5D) && class_add(&tmp, 0x5F, 0x5F) &&
             class_add(&tmp, 0x7B, 0x7B) && class_add(&tmp, 0x7D, 0x7D);
        break;
    case 'M':
        ok = class_add(&tmp, SYM_MARK, SYM_MARK);
        break;
    case 'S': /* ASCII symbols as llama.cpp lists them: $ + < = > ^ ` | (not '~') */
        ok = class_add(&tmp, SYM_SYMBOL, SYM_SYMBOL) && class_add(&tmp, 0x24, 0x24) &&
             class_add(&tmp, 0x2B, 0x2B) && class_add(&tmp, 0x3C, 0x3E) &&
             class_add(&tmp, 0x5E, 0x5E) && class_add(&tmp, 0x60, 0x60) &&
             class_add(&tmp, 0x7C, 0x7C);
        break;
    default:
        ok = false;
        break;
    }
    ok = ok && finish_class(&tmp, negate);
    for (size_t i = 0; ok && i < tmp.n; i++)
        ok = class_add(c, tmp.r[i].lo, tmp.r[i].hi);
    free(tmp.r);
    if (!ok)
        fail(ps, QL_ENOMEM, "out of memory");
    return ok;
}

static int hex_value(uint32_t c)
{
    if (c >= '0' && c <= '9')
        return (int)(c - '0');
    if (c >= 'a' && c <= 'f')
        return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F')
        return (int)(c - 'A' + 10);
    return -1;
}

/* Parses the escape after a backslash (ps->i at the character after '\').
 * Either sets *lit to a literal symbol (returns 1) or names a class escape in
 * *cls_kind / *cls_neg (returns 2); -1 on error. */
static int parse_escape(parser *ps, uint32_t *lit, char *cls_kind, bool *cls_neg)
{
    if (ps->i >= ps->n)
        return fail(ps, QL_EFORMAT, "pattern ends after '\\'");
    uint32_t c = ps->p[ps->i++];
    switch (c) {
    case 's':
    case 'd':
    case 'w':
        *cls_kind = (char)c;
        *cls_neg = false;
        return 2;
    case 'S':
    case 'D':
    case 'W':
        *cls_kind = (char)(c + ('a' - 'A'));
        *cls_neg = true;
        return 2;
    case 'r':
        *lit = '\r';
        return 1;
    case 'n':
        *lit = '\n';
        return 1;
    case 't':
        *lit = '\t';
        return 1;
    case 'f':
        *lit = '\f';
        return 1;
    case 'v':
        *lit = '\v';
        return 1;
    case 'x':
    case 'u': {
        int nd = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int k = 0; k < nd; k++) {
            int h = ps->i < ps->n ? hex_value(ps->p[ps->i]) : -1;
            if (h < 0)
                return fail(ps, QL_EFORMAT, "bad hexadecimal escape");
            v = v * 16 + (uint32_t)h;
            ps->i++;
        }
        *lit = v;
        return 1;
    }
    case 'p': {
        /* \p{X} or \p{Lx}: the categories llama.cpp collapses. */
        uint32_t name[3] = {0};
        size_t len = 0;
        if (!at(ps, '{'))
            return fail(ps, QL_EFORMAT, "expected '{' after \\p");
        ps->i++;
        while (ps->i < ps->n && ps->p[ps->i] != '}' && len < 3)
            name[len++] = ps->p[ps->i++];
        if (!at(ps, '}'))
            return fail(ps, QL_EUNSUPPORTED, "unsupported Unicode property");
        ps->i++;
        if (!ps->re->collapsed)
            return fail(ps, QL_EUNSUPPORTED, "unsupported Unicode property");
        if (len == 1 && (name[0] == 'N' || name[0] == 'L' || name[0] == 'P' || name[0] == 'M' ||
                         name[0] == 'S')) {
            *cls_kind = (char)name[0];
        } else if (len == 2 && name[0] == 'L' &&
                   (name[1] == 'u' || name[1] == 'l' || name[1] == 't' || name[1] == 'm' ||
                    name[1] == 'o')) {
            *cls_kind = 'L';
        } else {
            return fail(ps, QL_EUNSUPPORTED, "unsupported Unicode property");
        }
        *cls_neg = false;
        return 2;
    }
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            return fail(ps, QL_EUNSUPPORTED, "unsupported escape");
        *lit = c; /* escaped punctuation stands for itself */
        return 1;
    }
}

static int literal_check(parser *ps, uint32_t c)
{
    /* Collapsed text has no non-ASCII code points, so llama.cpp refuses such patterns. */
    if (ps->re->collapsed && c >= 0x80)
        return fail(ps, QL_EUNSUPPORTED, "non-ASCII literal in a pattern with \\p{..}");
    return 0;
}

/* Parses a bracket class; ps->i is after '['. Returns a N_CLASS node. */
static int parse_class(parser *ps)
{
    bool negate = false;
    if (at(ps, '^')) {
        negate = true;
        ps->i++;
    }
    int ci = new_class(ps);
    if (ci < 0)
        return -1;
    bool first = true;
    for (;;) {
        if (ps->i >= ps->n)
            return fail(ps, QL_EFORMAT, "unterminated '['");
        uint32_t c = ps->p[ps->i];
        if (c == ']' && !first)
            break;
        first = false;
        ps->i++;
        uint32_t lo;
        if (c == '\\') {
            char kind = 0;
            bool neg = false;
            int r = parse_escape(ps, &lo, &kind, &neg);
            if (r < 0)
                return -1;
            if (r == 2) {
                if (!add_escape_class(ps, &ps->re->classes[ci], kind, neg))
                    return -1;
                continue;
            }
        } else {
            if (literal_check(ps, c) < 0)
                return -1;
            lo = c;
        }
        uint32_t hi = lo;
        if (at(ps, '-') && ps->i + 1 < ps->n && ps->p[ps->i + 1] != ']') {
            ps->i++;
            uint32_t c2 = ps->p[ps->i++];
            if (c2 == '\\') {
                char kind = 0;
                bool neg = false;
                int r = parse_escape(ps, &hi, &kind, &neg);
                if (r < 0)
                    return -1;
                if (r == 2)
                    return fail(ps, QL_EFORMAT, "class escape as a range bound");
            } else {
                if (literal_check(ps, c2) < 0)
                    return -1;
                hi = c2;
            }
            if (hi < lo)
                return fail(ps, QL_EFORMAT, "range out of order");
        }
        if (!class_add(&ps->re->classes[ci], lo, hi))
            return fail(ps, QL_ENOMEM, "out of memory");
    }
    ps->i++; /* ']' */
    if (!finish_class(&ps->re->classes[ci], negate))
        return fail(ps, QL_ENOMEM, "out of memory");
    int nd = new_node(ps, N_CLASS);
    if (nd >= 0)
        ps->nodes[nd].c = (uint32_t)ci;
    return nd;
}

static int parse_alt(parser *ps);

static int parse_atom(parser *ps)
{
    uint32_t c = ps->p[ps->i++];
    int nd;
    switch (c) {
    case '(': {
        int kind = 0; /* 0 group, 1 lookahead, 2 negative lookahead */
        if (at(ps, '?')) {
            if (ps->i + 1 >= ps->n)
                return fail(ps, QL_EFORMAT, "unterminated group");
            uint32_t k = ps->p[ps->i + 1];
            if (k == ':')
                kind = 0;
            else if (k == '=')
                kind = 1;
            else if (k == '!')
                kind = 2;
            else
                return fail(ps, QL_EUNSUPPORTED, "unsupported group type");
            ps->i += 2;
        }
        int inner = parse_alt(ps);
        if (inner < 0)
            return -1;
        if (!at(ps, ')'))
            return fail(ps, QL_EFORMAT, "missing ')'");
        ps->i++;
        if (kind == 0)
            return inner;
        nd = new_node(ps, N_LOOK);
        if (nd >= 0) {
            ps->nodes[nd].a = inner;
            ps->nodes[nd].neg = kind == 2;
        }
        return nd;
    }
    case '[':
        return parse_class(ps);
    case '.':
        return new_node(ps, N_ANY);
    case '^':
        return new_node(ps, N_BOL);
    case '$':
        return new_node(ps, N_EOL);
    case '\\': {
        uint32_t lit = 0;
        char kind = 0;
        bool neg = false;
        int r = parse_escape(ps, &lit, &kind, &neg);
        if (r < 0)
            return -1;
        if (r == 2) {
            int ci = new_class(ps);
            if (ci < 0 || !add_escape_class(ps, &ps->re->classes[ci], kind, neg))
                return -1;
            if (!finish_class(&ps->re->classes[ci], false))
                return fail(ps, QL_ENOMEM, "out of memory");
            nd = new_node(ps, N_CLASS);
            if (nd >= 0)
                ps->nodes[nd].c = (uint32_t)ci;
            return nd;
        }
        c = lit;
        break;
    }
    case '*':
    case '+':
    case '?':
        ps->i--;
        return fail(ps, QL_EFORMAT, "quantifier without an operand");
    default:
        if (literal_check(ps, c) < 0)
            return -1;
        break;
    }
    nd = new_node(ps, N_CHAR);
    if (nd >= 0)
        ps->nodes[nd].c = c;
    return nd;
}

/* Reads a decimal number for a {n,m} bound; returns -1 when there is none. */
static int parse_bound(parser *ps)
{
    int v = -1;
    while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (int)(ps->p[ps->i] - '0');
        if (v > REP_LIMIT)
            return REP_LIMIT + 1;
        ps->i++;
    }
    return v;
}

/* Parses a quantifier at ps->i, if any. Returns 1 with min, max and greedy set, 0 when
 * there is no quantifier (ps->i unchanged), -1 on error. */
static int parse_quant(parser *ps, int *min, int *max, bool *greedy)
{
    if (ps->i >= ps->n)
        return 0;
    uint32_t c = ps->p[ps->i];
    if (c == '*' || c == '+' || c == '?') {
        *min = c == '+' ? 1 : 0;
        *max = c == '?' ? 1 : REP_INF;
        ps->i++;
    } else if (c == '{') {
        size_t save = ps->i;
        ps->i++;
        int lo = parse_bound(ps), hi = lo;
        if (lo >= 0 && at(ps, ',')) {
            ps->i++;
            hi = parse_bound(ps);
            if (hi < 0)
                hi = REP_INF;
        }
        if (lo < 0 || !at(ps, '}')) {
            ps->i = save; /* not a quantifier: '{' is a literal (ECMAScript Annex B) */
            return 0;
        }
        ps->i++;
        if (lo > REP_LIMIT || hi > REP_LIMIT)
            return fail(ps, QL_EUNSUPPORTED, "repetition bound too large");
        if (hi != REP_INF && hi < lo)
            return fail(ps, QL_EFORMAT, "repetition bounds out of order");
        *min = lo;
        *max = hi;
    } else {
        return 0;
    }
    *greedy = true;
    if (at(ps, '?')) {
        *greedy = false;
        ps->i++;
    }
    return 1;
}

static int parse_seq(parser *ps)
{
    int seq = -1;
    while (ps->i < ps->n && ps->p[ps->i] != '|' && ps->p[ps->i] != ')') {
        bool quantifiable = ps->p[ps->i] != '^' && ps->p[ps->i] != '$';
        int atom = parse_atom(ps);
        if (atom < 0)
            return -1;
        int min, max;
        bool greedy;
        int q = parse_quant(ps, &min, &max, &greedy);
        if (q < 0)
            return -1;
        if (q == 1) {
            if (!quantifiable || ps->nodes[atom].kind == N_LOOK)
                return fail(ps, QL_EUNSUPPORTED, "quantified assertion");
            int rep = new_node(ps, N_REP);
            if (rep < 0)
                return -1;
            ps->nodes[rep].a = atom;
            ps->nodes[rep].min = min;
            ps->nodes[rep].max = max;
            ps->nodes[rep].greedy = greedy;
            atom = rep;
        }
        if (seq < 0) {
            seq = atom;
        } else {
            int cat = new_node(ps, N_CAT);
            if (cat < 0)
                return -1;
            ps->nodes[cat].a = seq;
            ps->nodes[cat].b = atom;
            seq = cat;
        }
    }
    return seq >= 0 ? seq : new_node(ps, N_EMPTY);
}

static int parse_alt(parser *ps)
{
    int left = parse_seq(ps);
    if (left < 0 || !at(ps, '|'))
        return left;
    ps->i++;
    int right = parse_alt(ps); /* right-nested: earlier alternatives keep priority */
    if (right < 0)
        return -1;
    int alt = new_node(ps, N_ALT);
    if (alt >= 0) {
        ps->nodes[alt].a = left;
        ps->nodes[alt].b = right;
    }
    return alt;
}

static bool nullable(const node *nodes, int i)
{
    const node *nd = &nodes[i];
    switch (nd->kind) {
    case N_CHAR:
    case N_CLASS:
    case N_ANY:
        return false;
    case N_CAT:
        return nullable(nodes, nd->a) && nullable(nodes, nd->b);
    case N_ALT:
        return nullable(nodes, nd->a) || nullable(nodes, nd->b);
    case N_REP:
        return nd->min == 0 || nullable(nodes, nd->a);
    default:
        return true; /* empty, anchors, lookaheads */
    }
}

/* A starred operand that can match empty would loop forever in a plain backtracker. */
static bool has_nullable_star(const node *nodes, int i)
{
    const node *nd = &nodes[i];
    switch (nd->kind) {
    case N_CAT:
    case N_ALT:
        return has_nullable_star(nodes, nd->a) || has_nullable_star(nodes, nd->b);
    case N_LOOK:
        return has_nullable_star(nodes, nd->a);
    case N_REP:
        return (nd->max == REP_INF && nullable(nodes, nd->a)) || has_nullable_star(nodes, nd->a);
    default:
        return false;
    }
}

static int emit(ql_regex *re, int op, int32_t x, int32_t y)
{
    if (re->n_prog == re->cap_prog) {
        size_t cap = re->cap_prog ? 2 * re->cap_prog : 64;
        inst *p = realloc(re->prog, cap * sizeof *p);
        if (!p)
            return -1;
        re->prog = p;
        re->cap_prog = cap;
    }
    inst *in = &re->prog[re->n_prog];
    in->op = (uint8_t)op;
    in->neg = 0;
    in->x = x;
    in->y = y;
    return (int)re->n_prog++;
}

#define HERE(re) ((int32_t)(re)->n_prog)

static bool gen(ql_regex *re, const node *nodes, int i)
{
    const node *nd = &nodes[i];
    switch (nd->kind) {
    case N_EMPTY:
        return true;
    case N_CHAR:
        return emit(re, I_CHAR, (int32_t)nd->c, 0) >= 0;
    case N_CLASS:
        return emit(re, I_CLASS, (int32_t)nd->c, 0) >= 0;
    case N_ANY:
        return emit(re, I_ANY, 0, 0) >= 0;
    case N_BOL:
        return emit(re, I_BOL, 0, 0) >= 0;
    case N_EOL:
        return emit(re, I_EOL, 0, 0) >= 0;
    case N_CAT:
        return gen(re, nodes, nd->a) && gen(re, nodes, nd->b);
    case N_ALT: {
        int split = emit(re, I_SPLIT, 0, 0);
        if (split < 0)
            return false;
        re->prog[split].x = HERE(re);
        if (!gen(re, nodes, nd->a))
            return false;
        int jmp = emit(re, I_JMP, 0, 0);
        if (jmp < 0)
            return false;
        re->prog[split].y = HERE(re);
        if (!gen(re, nodes, nd->b))
            return false;
        re->prog[jmp].x = HERE(re);
        return true;
    }
    case N_REP: {
        for (int k = 0; k < nd->min; k++)
            if (!gen(re, nodes, nd->a))
                return false;
        if (nd->max == REP_INF) {
            /* L: SPLIT body, out; body: e; JMP L; out: (branches swapped when lazy) */
            int split = emit(re, I_SPLIT, 0, 0);
            if (split < 0)
                return false;
            int32_t body = HERE(re);
            if (!gen(re, nodes, nd->a) || emit(re, I_JMP, split, 0) < 0)
                return false;
            re->prog[split].x = nd->greedy ? body : HERE(re);
            re->prog[split].y = nd->greedy ? HERE(re) : body;
            return true;
        }
        /* Optional copies e? e? ...: skipping one skips all later ones. */
        int n_opt = nd->max - nd->min;
        int *splits = n_opt ? malloc((size_t)n_opt * sizeof *splits) : NULL;
        if (n_opt && !splits)
            return false;
        for (int k = 0; k < n_opt; k++) {
            splits[k] = emit(re, I_SPLIT, 0, 0);
            if (splits[k] < 0) {
                free(splits);
                return false;
            }
            re->prog[splits[k]].x = HERE(re);
            if (!gen(re, nodes, nd->a)) {
                free(splits);
                return false;
            }
        }
        for (int k = 0; k < n_opt; k++) {
            int32_t body = re->prog[splits[k]].x;
            re->prog[splits[k]].x = nd->greedy ? body : HERE(re);
            re->prog[splits[k]].y = nd->greedy ? HERE(re) : body;
        }
        free(splits);
        return true;
    }
    case N_LOOK: {
        int look = emit(re, I_LOOK, 0, 0);
        if (look < 0)
            return false;
        re->prog[look].neg = nd->neg;
        re->prog[look].x = HERE(re);
        if (!gen(re, nodes, nd->a) || emit(re, I_MATCH, 0, 0) < 0)
            return false;
        re->prog[look].y = HERE(re);
        return true;
    }
    }
    return false;
}

/* llama.cpp collapses the text when the pattern names one of these categories. */
static bool names_category(const char *pattern)
{
    static const char *const cats[] = {"\\p{N}",  "\\p{L}",  "\\p{P}",  "\\p{M}",  "\\p{S}",
                                       "\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"};
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
        if (strstr(pattern, cats[i]))
            return true;
    return false;
}

ql_status ql_regex_compile(ql_regex **out, const char *pattern, ql_error *err)
{
    *out = NULL;
    ql_regex *re = calloc(1, sizeof *re);
    parser ps = {0};
    ps.re = re;
    ps.err = err;
    if (!re || !(re->pattern = ql_strdup(pattern))) {
        free(re);
        return ql_error_set(err, QL_ENOMEM, "regex: out of memory");
    }
    re->collapsed = names_category(pattern);

    size_t len = strlen(pattern);
    ps.p = malloc((len + 1) * sizeof *ps.p);
    if (!ps.p) {
        fail(&ps, QL_ENOMEM, "out of memory");
        goto out_fail;
    }
    for (size_t pos = 0; pos < len;)
        ps.p[ps.n++] = ql_utf8_decode(pattern, len, &pos);

    int root = parse_alt(&ps);
    if (root < 0)
        goto out_fail;
    if (ps.i != ps.n) {
        fail(&ps, QL_EFORMAT, "unbalanced ')'");
        goto out_fail;
    }
    if (nullable(ps.nodes, root)) {
        fail(&ps, QL_EUNSUPPORTED, "pattern can match the empty string");
        goto out_fail;
    }
    if (has_nullable_star(ps.nodes, root)) {
        fail(&ps, QL_EUNSUPPORTED, "repeated operand can match the empty string");
        goto out_fail;
    }
    if (!gen(re, ps.nodes, root) || emit(re, I_MATCH, 0, 0) < 0) {
        fail(&ps, QL_ENOMEM, "out of memory");
        goto out_fail;
    }
    free(ps.p);
    free(ps.nodes);
    *out = re;
    return QL_OK;

out_fail:
    free(ps.p);
    free(ps.nodes);
    ql_regex_free(re);
    return ps.st;
}

void ql_regex_free(ql_regex *re)
{
    if (!re)
        return;
    for (size_t i = 0; i < re->n_classes; i++)
        free(re->classes[i].r);
    free(re->classes);
    free(re->prog);
    free(re->pattern);
    free(re);
}

bool ql_regex_is_collapsed(const ql_regex *re)
{
    return re->collapsed;
}

/* ---------------------------------------------------------------------------
 * Matching */

typedef struct {
    int32_t pc;
    size_t sp;
} frame;

void ql_regex_stack_deinit(ql_regex_stack *st)
{
    free(st->entries);
    st->entries = NULL;
    st->n = st->cap = 0;
}

static bool push(ql_regex_stack *st, int32_t pc, size_t sp)
{
    if (st->n == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 256;
        frame *f = realloc(st->entries, cap * sizeof *f);
        if (!f)
            return false;
        st->entries = f;
        st->cap = cap;
    }
    frame *f = (frame *)st->entries + st->n++;
    f->pc = pc;
    f->sp = sp;
    return true;
}

#define RUN_NOMATCH ((ptrdiff_t)-1)
#define RUN_OOM     ((ptrdiff_t)-2)

/* Runs the program from pc at position sp; returns the end of the first match in
 * priority order, RUN_NOMATCH, or RUN_OOM. Leaves the stack as it found it. */
static ptrdiff_t run(const ql_regex *re, ql_regex_stack *st, int32_t pc, size_t sp,
                     const uint32_t *t, size_t begin, size_t end)
{
    const size_t base = st->n;
    if (!push(st, pc, sp))
        return RUN_OOM;
    while (st->n > base) {
        frame f = ((frame *)st->entries)[--st->n];
        pc = f.pc;
        sp = f.sp;
        for (;;) {
            const inst *in = &re->prog[pc];
            switch (in->op) {
            case I_CHAR:
                if (sp < end && t[sp] == (uint32_t)in->x) {
                    pc++;
                    sp++;
                    continue;
                }
                break;
            case I_CLASS:
                if (sp < end && class_has(&re->classes[in->x], t[sp])) {
                    pc++;
                    sp++;
                    continue;
                }
                break;
            case I_ANY:
                /* ECMAScript '.': anything but a line terminator. */
                if (sp < end && t[sp] != '\n' && t[sp] != '\r' && t[sp] != 0x2028 &&
                    t[sp] != 0x2029) {
                    pc++;
                    sp++;
                    continue;
                }
                break;
            case I_SPLIT:
                if (!push(st, in->y, sp)) {
                    st->n = base;
                    return RUN_OOM;
                }
                pc = in->x;
                continue;
            case I_JMP:
                pc = in->x;
                continue;
            case I_BOL:
                if (sp == begin) {
                    pc++;
                    continue;
                }
                break;
            case I_EOL:
                if (sp == end) {
                    pc++;
                    continue;
                }
                break;
            case I_LOOK: {
                ptrdiff_t r = run(re, st, in->x, sp, t, begin, end);
                if (r == RUN_OOM) {
                    st->n = base;
                    return RUN_OOM;
                }
                if ((r >= 0) != (in->neg != 0)) {
                    pc = in->y;
                    continue;
                }
                break;
            }
            case I_MATCH:
                st->n = base;
                return (ptrdiff_t)sp;
            }
            break; /* this path failed: backtrack */
        }
    }
    return RUN_NOMATCH;
}

int ql_regex_search(const ql_regex *re, ql_regex_stack *st, const uint32_t *text, size_t begin,
                    size_t end, size_t from, size_t *mstart, size_t *mend)
{
    for (size_t s = from; s < end; s++) {
        ptrdiff_t r = run(re, st, 0, s, text, begin, end);
        if (r == RUN_OOM)
            return -1;
        if (r >= 0) {
            *mstart = s;
            *mend = (size_t)r;
            return 1;
        }
    }
    return 0;
}
