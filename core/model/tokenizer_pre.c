/* Pre-tokenizers of byte-level BPE vocabularies: text -> words, as llama.cpp's
 * unicode_regex_split does it.
 *
 * tokenizer.ggml.pre names a list of patterns applied in turn: each pattern splits
 * every segment left by the previous one into its matches and the gaps between them
 * (a gap is a segment too). Two patterns (GPT-2's and Llama 3's) are handled by
 * hand-written splitters in llama.cpp, whose behaviour differs from the regex in
 * small ways, so qlab re-implements those two splitters step for step; every other
 * pattern goes through PCRE2 (regex.c) on collapsed text, like llama.cpp's
 * std::regex fallback. */
#include <stdlib.h>
#include <string.h>

#include "base/unicode.h"
#include "base/util.h"
#include "model/tokenizer_impl.h"

/* ---------------------------------------------------------------------------
 * Patterns (from llama.cpp's llm_tokenizer_bpe, b4747) */

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

/* Llama 3, with the case-insensitive contractions spelled out for ECMAScript. */
static const char RE_LLAMA3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Qwen2: Llama 3's pattern with single digits. No hand-written splitter in llama.cpp. */
static const char RE_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct {
    const char *names;           /* space-separated tokenizer.ggml.pre values */
    const char *patterns[5];     /* applied in order; NULL-terminated */
    bool ignore_merges, add_bos; /* llama.cpp's per-type defaults */
} pre_def;

static const pre_def pre_defs[] = {
    /* Used when tokenizer.ggml.pre is absent or "default". */
    {"default",
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL},
     false,
     false},
    {"llama3 llama-v3 llama-bpe falcon3", {RE_LLAMA3, NULL}, true, true},
    {"dbrx smaug-bpe", {RE_LLAMA3, NULL}, false, false},
    {"gpt-2 phi-2 gigachat mpt olmo jais", {RE_GPT2, NULL}, false, false},
    {"starcoder refact command-r smollm codeshell exaone minerva-7b",
     {"\\p{N}", RE_GPT2, NULL},
     false,
     false},
    {"qwen2 deepseek-r1-qwen stablelm2 megrez", {RE_QWEN2, NULL}, false, false},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]", NULL}, false, false},
    /* The CJK class is U+4E00..U+9FA5, U+0800..U+4E00, U+AC00..U+D7FF, written in
     * llama.cpp as literal characters. */
    {"deepseek-coder",
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\u4E00-\\u9FA5\\u0800-\\u4E00\\uAC00-\\uD7FF]+",
      "\\p{N}"},
     false,
     false},
};

#define N_PRE_DEFS (sizeof pre_defs / sizeof pre_defs[0])

static bool name_in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

void ql_pretok_names(char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < N_PRE_DEFS; i++) {
        int w = snprintf(out + used, size - used, "%s%s", used ? " " : "", pre_defs[i].names);
        if (w < 0 || (size_t)w >= size - used)
            break;
        used += (size_t)w;
    }
}

static ql_status pretok_build(ql_pretok *p, const char *name, bool hand_written, ql_error *err)
{
    memset(p, 0, sizeof *p);
    const char *key = name ? name : "default";
    const pre_def *def = NULL;
    for (size_t i = 0; i < N_PRE_DEFS && !def; i++)
        if (name_in_list(pre_defs[i].names, key))
            def = &pre_defs[i];
    if (!def) {
        char known[512];
        ql_pretok_names(known, sizeof known);
        return ql_error_set(err, QL_EUNSUPPORTED,
                            "tokenizer.ggml.pre '%s' is not a pre-tokenizer qlab knows "
                            "(known: %s)",
                            key, known);
    }
    ql_strlcpy(p->name, key, sizeof p->name);
    p->ignore_merges = def->ignore_merges;
    p->add_bos = def->add_bos;
    for (int i = 0; i < 5 && def->patterns[i]; i++) {
        const char *pat = def->patterns[i];
        if (hand_written && strcmp(pat, RE_GPT2) == 0) {
            p->kind[i] = QL_STAGE_GPT2;
        } else if (hand_written && strcmp(pat, RE_LLAMA3) == 0) {
            p->kind[i] = QL_STAGE_LLAMA3;
        } else {
            p->kind[i] = QL_STAGE_REGEX;
            ql_status st = ql_regex_compile(&p->re[i], pat, 0, err);
            if (st != QL_OK) {
                ql_pretok_deinit(p);
                return st;
            }
        }
        p->n_stages = i + 1;
    }
    return QL_OK;
}

ql_status ql_pretok_init(ql_pretok *p, const char *name, ql_error *err)
{
    return pretok_build(p, name, true, err);
}

ql_status ql_pretok_init_regex_only(ql_pretok *p, const char *name, ql_error *err)
{
    return pretok_build(p, name, false, err);
}

void ql_pretok_deinit(ql_pretok *p)
{
    for (int i = 0; i < QL_PRETOK_MAX_STAGES; i++) {
        ql_regex_free(p->re[i]);
        p->re[i] = NULL;
    }
    p->n_stages = 0;
}

/* ---------------------------------------------------------------------------
 * Segment lists */

static bool seg_push(ql_tok_scratch *s, size_t *n, size_t len)
{
    if (*n == s->cap_seg2 && !ql_grow((void **)&s->seg2, &s->cap_seg2, *n + 1, sizeof *s->seg2))
        return false;
    s->seg2[(*n)++] = len;
    return true;
}

/* Context of one hand-written splitter over the segment [ini, end) of s->cpts. */
typedef struct {
    const uint32_t *cpt;
    const uint16_t *flags;
    size_t ini, end;
} span;

#define OUT_OF_SPAN 0xFFFFFFFFu

static uint32_t cpt_at(const span *sp, size_t i)
{
    return i >= sp->ini && i < sp->end ? sp->cpt[i] : OUT_OF_SPAN;
}

/* Flags outside the segment are 0, which no code point has (each has a category). */
static unsigned flags_at(const span *sp, size_t i)
{
    return i >= sp->ini && i < sp->end ? sp->flags[i] : 0u;
}

#define F_WLN (QL_UNI_WHITESPACE | QL_UNI_LETTER | QL_UNI_NUMBER)

/* 's 't 're 've 'm 'll 'd at pos (a quote); returns the length matched or 0.
 * fold: compare case-insensitively (Llama 3). */
static size_t contraction(const span *sp, size_t pos, bool fold)
{
    if (pos + 1 >= sp->end)
        return 0;
    uint32_t c1 = cpt_at(sp, pos + 1);
    if (fold)
        c1 = ql_unicode_tolower(c1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return 2;
    if (pos + 2 >= sp->end)
        return 0;
    uint32_t c2 = cpt_at(sp, pos + 2);
    if (fold)
        c2 = ql_unicode_tolower(c2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return 3;
    return 0;
}

/* llama.cpp's splitter for the GPT-2 pattern; appends word lengths. */
static bool split_gpt2(const span *sp, ql_tok_scratch *s, size_t *n_out)
{
    size_t pos = sp->ini;
    while (pos < sp->end) {
        const size_t start = pos;
        const uint32_t cpt = cpt_at(sp, pos);
        const unsigned flags = flags_at(sp, pos);
        size_t c = cpt == '\'' ? contraction(sp, pos, false) : 0;
        if (c) {
            pos += c;
        } else {
            unsigned f2 = cpt == ' ' ? flags_at(sp, pos + 1) : flags;
            if (f2 & QL_UNI_LETTER) { /*  ?\p{L}+ */
                pos += cpt == ' ';
                while (f2 & QL_UNI_LETTER)
                    f2 = flags_at(sp, ++pos);
            } else if (f2 & QL_UNI_NUMBER) { /*  ?\p{N}+ */
                pos += cpt == ' ';
                while (f2 & QL_UNI_NUMBER)
                    f2 = flags_at(sp, ++pos);
            } else if (!(f2 & F_WLN) && f2) { /*  ?[^\s\p{L}\p{N}]+ */
                pos += cpt == ' ';
                while (!(f2 & F_WLN) && f2)
                    f2 = flags_at(sp, ++pos);
            } else {
                size_t n_ws = 0;
                while (flags_at(sp, pos + n_ws) & QL_UNI_WHITESPACE)
                    n_ws++;
                if (n_ws > 1 && cpt_at(sp, pos + n_ws) != OUT_OF_SPAN)
                    pos += n_ws - 1; /* \s+(?!\S): leave the last one to the next word */
                else if (n_ws > 0)
                    pos += n_ws;
                else
                    pos++; /* nothing matches: the character is a word of its own */
            }
        }
        if (!seg_push(s, n_out, pos - start))
            return false;
    }
    return true;
}

/* llama.cpp's splitter for the Llama 3 pattern. One quirk is kept on purpose: the
 * " ?[^\s\p{L}\p{N}]+" branch tests the flags of the current character, not of the
 * one after the optional space. */
static bool split_llama3(const span *sp, ql_tok_scratch *s, size_t *n_out)
{
    size_t pos = sp->ini;
    while (pos < sp->end) {
        const size_t start = pos;
        const uint32_t cpt = cpt_at(sp, pos);
        const unsigned flags = flags_at(sp, pos);
        size_t c = cpt == '\'' ? contraction(sp, pos, true) : 0;
        if (c) {
            pos += c;
        } else if (!(cpt == '\r' || cpt == '\n' || (flags & QL_UNI_NUMBER)) &&
                   ((flags & QL_UNI_LETTER) || (flags_at(sp, pos + 1) & QL_UNI_LETTER))) {
            /* [^\r\n\p{L}\p{N}]?\p{L}+ */
            pos++;
            while (flags_at(sp, pos) & QL_UNI_LETTER)
                pos++;
        } else if (flags & QL_UNI_NUMBER) {
            /* \p{N}{1,3}: a run of digits becomes words of three (the last shorter) */
            size_t ini = pos;
            while (flags_at(sp, pos) & QL_UNI_NUMBER) {
                if (++pos - ini >= 3) {
                    if (!seg_push(s, n_out, pos - ini))
                        return false;
                    ini = pos;
                }
            }
            if (pos > ini && !seg_push(s, n_out, pos - ini))
                return false;
            continue;
        } else {
            unsigned f2 = cpt == ' ' ? flags_at(sp, pos + 1) : flags;
            if (!(f2 & F_WLN) && flags) {
                /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
                pos += cpt == ' ';
                while (!(f2 & F_WLN) && f2)
                    f2 = flags_at(sp, ++pos);
                uint32_t c2 = cpt_at(sp, pos);
                while (c2 == '\r' || c2 == '\n')
                    c2 = cpt_at(sp, ++pos);
            } else {
                size_t n_ws = 0, last_rn = 0;
                while (flags_at(sp, pos + n_ws) & QL_UNI_WHITESPACE) {
                    uint32_t c2 = cpt_at(sp, pos + n_ws);
                    if (c2 == '\r' || c2 == '\n')
                        last_rn = pos + n_ws + 1;
                    n_ws++;
                }
                if (last_rn > 0)
                    pos = last_rn; /* \s*[\r\n]+ */
                else if (n_ws > 1 && cpt_at(sp, pos + n_ws) != OUT_OF_SPAN)
                    pos += n_ws - 1; /* \s+(?!\S) */
                else if (n_ws > 0)
                    pos += n_ws; /* \s+ */
                else
                    pos++;
            }
        }
        if (!seg_push(s, n_out, pos - start))
            return false;
    }
    return true;
}

/* Regex stage over one segment: matches and the gaps between them become words. */
static ql_status split_regex(const ql_regex *re, const uint32_t *sym, size_t ini, size_t end,
                             ql_tok_scratch *s, size_t *n_out, ql_error *err)
{
    size_t pos = ini;
    while (pos < end) {
        size_t ms, me;
        bool found;
        ql_status st = ql_regex_search(re, s->matcher, sym, ini, end, pos, &found, &ms, &me, err);
        if (st != QL_OK)
            return st;
        if (!found)
            break;
        if (ms > pos && !seg_push(s, n_out, ms - pos))
            goto out_oom;
        if (!seg_push(s, n_out, me - ms))
            goto out_oom;
        pos = me;
    }
    if (pos < end && !seg_push(s, n_out, end - pos))
        goto out_oom;
    return QL_OK;
out_oom:
    return ql_error_set(err, QL_ENOMEM, "tokenizer: out of memory while splitting");
}

static bool grow_cpts(ql_tok_scratch *s, size_t n)
{
    if (n <= s->cap_cpts)
        return true;
    size_t cap = s->cap_cpts ? s->cap_cpts : 1024;
    while (cap < n)
        cap *= 2;
    uint32_t *c = realloc(s->cpts, cap * sizeof *c);
    if (!c)
        return false;
    s->cpts = c;
    uint16_t *f = realloc(s->flags, cap * sizeof *f);
    if (!f)
        return false;
    s->flags = f;
    uint32_t *y = realloc(s->sym, cap * sizeof *y);
    if (!y)
        return false;
    s->sym = y;
    s->cap_cpts = cap;
    return true;
}

ql_status ql_pretok_split(const ql_pretok *p, const char *text, size_t len, ql_tok_scratch *s,
                          ql_error *err)
{
    /* A text has at most len code points. */
    if (!grow_cpts(s, len ? len : 1))
        return ql_error_set(err, QL_ENOMEM, "tokenizer: out of memory for %zu bytes of text", len);
    size_t n = 0;
    for (size_t pos = 0; pos < len;) {
        uint32_t c = ql_utf8_decode(text, len, &pos);
        s->cpts[n] = c;
        s->flags[n] = (uint16_t)ql_unicode_flags(c);
        n++;
    }

    /* Start from one segment holding everything. */
    if (!s->cap_seg) {
        s->seg = malloc(1024 * sizeof *s->seg);
        if (!s->seg)
            return ql_error_set(err, QL_ENOMEM, "tokenizer: out of memory");
        s->cap_seg = 1024;
    }
    s->seg[0] = n;
    s->n_seg = 1;

    for (int k = 0; k < p->n_stages; k++) {
        if (p->kind[k] == QL_STAGE_REGEX) {
            if (!s->matcher && !(s->matcher = ql_regex_matcher_alloc()))
                return ql_error_set(err, QL_ENOMEM, "tokenizer: out of memory");
            bool collapsed = ql_regex_is_collapsed(p->re[k]);
            for (size_t i = 0; i < n; i++)
                s->sym[i] = collapsed ? ql_regex_collapse(s->cpts[i]) : ql_regex_widen(s->cpts[i]);
        }
        size_t n_out = 0, start = 0;
        for (size_t i = 0; i < s->n_seg; i++) {
            span sp = {s->cpts, s->flags, start, start + s->seg[i]};
            if (p->kind[k] == QL_STAGE_REGEX) {
                ql_status st = split_regex(p->re[k], s->sym, sp.ini, sp.end, s, &n_out, err);
                if (st != QL_OK)
                    return st;
            } else if (!(p->kind[k] == QL_STAGE_GPT2 ? split_gpt2(&sp, s, &n_out)
                                                     : split_llama3(&sp, s, &n_out))) {
                return ql_error_set(err, QL_ENOMEM, "tokenizer: out of memory while splitting");
            }
            start = sp.end;
        }
        /* The output list becomes the input of the next stage. */
        size_t *tmp = s->seg;
        size_t tcap = s->cap_seg;
        s->seg = s->seg2;
        s->cap_seg = s->cap_seg2;
        s->seg2 = tmp;
        s->cap_seg2 = tcap;
        s->n_seg = n_out;
    }
    return QL_OK;
}

void ql_tok_scratch_deinit(ql_tok_scratch *s)
{
    free(s->cpts);
    free(s->flags);
    free(s->sym);
    free(s->seg);
    free(s->seg2);
    ql_regex_matcher_free(s->matcher);
    free(s->text);
    free(s->syms);
    free(s->heap.a);
    memset(s, 0, sizeof *s);
}
