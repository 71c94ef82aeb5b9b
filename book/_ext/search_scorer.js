// The search page's scorer (html_search_scorer; book/_ext/book_site.py fills in ANSWERS at build time).
// Sphinx's searchtools.js lists every page that holds all the words of a query, at the top of the
// page, ranked by a few weights (a word in a title scores 15, in the text 5). This file, loaded
// after searchtools.js (in language_data.js), changes four things:
// * A query is read in the readers' own words: spelling variants become the book's spelling
//   before the query is split (VARIANTS: multihead -> multi-head, feedforward -> feed-forward,
//   cosine distance -> cosine similarity, one / single / combined matrix -> fused matrix,
//   dmodel / d model -> d_model, W^Q -> W_Q ...); a word no page holds is left out of the query
//   (and the page says so) instead of emptying the results; when no page holds every word, the
//   pages holding most of them are listed (and the page says so), and when no page holds any,
//   the page points to the Short answers and the claims index.
// * A query in the words of one of the five source questions puts the Short answers page first,
//   opened at that question's card: ANSWERS holds each card's anchor, its question, the reader's
//   words for it (book/_data/answers.yml, "search") and the key terms of its source thread
//   (book_site.THREAD_TERMS); the card with the most matching words, weighted by how few cards
//   share the word, wins. The card is listed even when the page lacks a word of the query,
//   provided the card matches at least two of the query's words and one that no other card holds.
// * Every other hit opens at the section whose title shares most words with the query (weighted
//   the same way among the page's titles), not at the top of a page 25-57 phone screens long.
// * A result's title shows no TeX source: a section title's "q\cdot k" reads "q·k".
var ANSWERS = /*ANSWERS*/ {};
var ANSWERS_PAGE = /*ANSWERS_PAGE*/ "";
// [pattern, the book's spelling]: applied in order to the lower-cased query (and to the cards' words).
var VARIANTS = [
  [/\bmulti[\s-]*heads?(ed)?\b/g, "multi-head"],
  [/\bfeed[\s-]*forwards?\b/g, "feed-forward"],
  [/\bself[\s-]*attentions?\b/g, "self-attention"],
  [/\bcos(ine)?[\s-]*(distances?|similarit(y|ies)|sim)\b/g, "cosine similarity"],
  [/\bdot[\s-]*products?\b/g, "dot product"],
  [/\bnon[\s-]*linear/g, "nonlinear"],
  [/\bres[\s-]*nets?\b/g, "resnet"],
  [/\blayer[\s-]*norm(alization|alisation)?\b/g, "layernorm"],
  [/\bq[\s-]*k[\s-]*norm(alization|alisation)?\b/g, "qk-norm"],
  [/\bpre[\s-]*ln\b/g, "pre-ln"],
  [/\bsoft[\s-]*max\b/g, "softmax"],
  [/\b(dense|fully[\s-]*connected|fc)\s+layers?\b/g, "linear layer"],
  [/\bd[\s_-]?model\b/g, "d_model"],
  [/\bd[\s_-]?k\b/g, "d_k"],
  // W^Q, W_i^Q, W^{Q}, WQ -> W_Q (and K, V, O)
  [/\bw\s*(?:_\s*\{?i\}?\s*)?\^\s*\{?\s*([qkvo])\s*\}?/g, "w_$1"],
  [/\bw([qkvo])\b/g, "w_$1"],
  [/\b(one|single|combined|merged|joint|unified|fused|big)\s+((big|single|weight|projection|full|bilinear)\s+)?matri(x|ces)\b/g,
    "fused matrix"],
  [/\binto\s+(a\s+|one\s+)?(single\s+)?(one|matrix)\b/g, "into one fused matrix"],
  [/\b(combin|merg|fus)(e|ed|es|ing)\b/g, "fuse"]
];
var Scorer = {
  // Sphinx's defaults (searchtools.js uses its own Scorer only when none is defined)
  objNameMatch: 11, objPartialMatch: 6, objPrio: {0: 15, 1: 5, 2: -5}, objPrioDefault: 0,
  title: 15, partialTitle: 7, term: 5, partialTerm: 2,
  _stems: null, _titles: null, _cards: null,
  normalize: function (text) {
    var out = " " + String(text).toLowerCase() + " ";
    VARIANTS.forEach(function (rule) { out = out.replace(rule[0], rule[1]); });
    return out.replace(/\s+/g, " ").trim();
  },
  queryStems: function () {
    if (Scorer._stems) { return Scorer._stems; }
    var query = new URLSearchParams(window.location.search).get("q") || "";
    Scorer._stems = Scorer.stemsOf(Scorer.normalize(query));
    return Scorer._stems;
  },
  stemsOf: function (text) {
    var stemmer = typeof Stemmer === "undefined" ? null : new Stemmer();
    var stop = typeof stopwords === "undefined" ? [] : stopwords;
    var out = [];
    String(text).toLowerCase().split(/[^\p{L}\p{N}_]+/u).forEach(function (word) {
      if (!word || stop.indexOf(word) !== -1) { return; }
      var stem = stemmer ? stemmer.stemWord(word) : word;
      if (out.indexOf(stem) === -1) { out.push(stem); }
    });
    return out;
  },
  // The candidate (of {key: text}) sharing most query words, each word weighted 1/(candidates holding
  // it); unless anyWord, none unless it shares a word that at most a third of the candidates hold
  // (a word every section title holds, "attention", picks no section); ties go to the first.
  // Returns {key, score, words (query words it shares), distinctive (shares a word only it holds)}.
  rank: function (candidates, anyWord) {
    var query = Scorer.queryStems(), stems = {}, holders = {}, best = null;
    var count = Object.keys(candidates).length;
    Object.keys(candidates).forEach(function (key) {
      stems[key] = Scorer.stemsOf(Scorer.normalize(candidates[key]));
      stems[key].forEach(function (s) { holders[s] = (holders[s] || 0) + 1; });
    });
    Object.keys(candidates).forEach(function (key) {
      var score = 0, distinctive = false, only = false, words = 0;
      query.forEach(function (s) {
        if (stems[key].indexOf(s) === -1) { return; }
        score += 1 / holders[s];
        words += 1;
        if (holders[s] <= Math.max(1, count / 3)) { distinctive = true; }
        if (holders[s] === 1) { only = true; }
      });
      if ((distinctive || anyWord) && score > 1e-9 && (!best || score > best.score + 1e-9)) {
        best = {key: key, score: score, words: words, only: only};
      }
    });
    return best;
  },
  best: function (candidates, anyWord) {
    var found = Scorer.rank(candidates, anyWord);
    return found ? found.key : null;
  },
  sectionsOf: function (docname) {
    if (!Scorer._titles) {
      Scorer._titles = {};
      var index = Search._index, all = index.alltitles || {};
      Object.keys(all).forEach(function (title) {
        all[title].forEach(function (pair) {
          var doc = index.docnames[pair[0]];
          // the page's own title; a proposition's label (#m6, #minilm-h2-proposition): a section's
          // heading reads better than the middle of a proposition
          if (pair[1] === null || /^[a-z]\d+$|-proposition$/.test(pair[1]) || /^ \(/.test(title)) { return; }
          (Scorer._titles[doc] = Scorer._titles[doc] || {})["#" + pair[1]] = title;
        });
      });
    }
    return Scorer._titles[docname] || {};
  },
  // Plain text of a section title's TeX (the index keeps titles' formulas as bare TeX source).
  plainTitle: function (title) {
    var symbols = {cdot: "·", times: "×", top: "ᵀ", le: "≤", ge: "≥", alpha: "α", beta: "β", sigma: "σ",
      tau: "τ", ell: "ℓ", varepsilon: "ε", epsilon: "ε", infty: "∞", to: "→", approx: "≈", ne: "≠"};
    return String(title)
      .replace(/\s*\\cdot\s*/g, "·").replace(/\s*\\times\s*/g, "×")
      .replace(/\\sqrt\s*\{([^{}]*)\}/g, function (_, x) { return /^\w+$/.test(x) ? "√" + x : "√(" + x + ")"; })
      .replace(/\^\s*\{?\\top\}?/g, "ᵀ")
      .replace(/\\(operatorname|mathrm|mathbf|text)\s*\{([^{}]*)\}/g, "$2")
      .replace(/\\([A-Za-z]+)\s*/g, function (_, name) { return name in symbols ? symbols[name] : name; })
      .replace(/[{}]/g, "");
  },
  plainResultTitle: function (title) {
    var parts = String(title).split(" > ");
    return [parts[0]].concat(parts.slice(1).map(Scorer.plainTitle)).join(" > ");
  },
  score: function (result) {
    // result: [docname, title, anchor, descr, score, filename]
    result[1] = Scorer.plainResultTitle(result[1]);
    if (result[0] === ANSWERS_PAGE) {
      var card = Scorer.best(ANSWERS, true);
      if (card) {
        result[2] = card;
        result[1] = result[1].split(" > ")[0] + " > " + ANSWERS[card].split(" | ")[0];
        return 1000 + result[4];
      }
      return result[4];
    }
    if (!result[2]) {
      var sections = Scorer.sectionsOf(result[0]), anchor = Scorer.best(sections);
      if (anchor) {
        result[2] = anchor;
        result[1] = result[1] + " > " + Scorer.plainTitle(sections[anchor]);
      }
    }
    return result[4];
  }
};

// The query in the readers' words (see the top of this file): Search's parser and search wrapped.
var ReaderSearch = {
  notes: [], words: {},
  known: function (word) {
    var index = Search._index;
    if (index.terms.hasOwnProperty(word) || index.titleterms.hasOwnProperty(word)) { return true; }
    if (word.length <= 2) { return false; }
    return Object.keys(index.terms).concat(Object.keys(index.titleterms)).some(function (term) {
      return term.indexOf(word) !== -1;
    });
  },
  // [docname, title, "", null, score, filename] of every page holding the most of `terms` (at least
  // two, or the one word of a one-word query), each page scored as Sphinx scores a page.
  mostWords: function (terms, excluded) {
    var index = Search._index, held = {}, scores = {};
    terms.forEach(function (word) {
      Search.performTermsSearch(new Set([word]), excluded).forEach(function (r) {
        held[r[5]] = (held[r[5]] || 0) + 1;
        scores[r[5]] = (scores[r[5]] || 0) + r[4];
      });
    });
    var most = Math.max.apply(null, [0].concat(Object.values(held)));
    if (most < Math.min(2, terms.length)) { return []; }
    var out = [];
    index.filenames.forEach(function (filename, file) {
      if (held[filename] === most) {
        out.push([index.docnames[file], index.titles[file], "", null, scores[filename], filename]);
      }
    });
    return out;
  },
  install: function () {
    if (typeof Search === "undefined" || Search._readersWords) { return; }
    Search._readersWords = true;
    var parse = Search._parseQuery, perform = Search._performSearch;
    Search._parseQuery = function (query) {
      var normal = Scorer.normalize(query);
      Scorer._stems = Scorer.stemsOf(normal);
      Scorer._original = query;
      ReaderSearch.words = {};   // stem -> the reader's word, for the notes
      var stemmer = typeof Stemmer === "undefined" ? null : new Stemmer();
      normal.split(/[^\p{L}\p{N}_]+/u).forEach(function (word) {
        if (word) { ReaderSearch.words[stemmer ? stemmer.stemWord(word) : word] = word; }
      });
      return parse(normal);
    };
    Search._performSearch = function (query, searchTerms, excludedTerms, highlightTerms, objectTerms) {
      ReaderSearch.notes = [];
      var missing = [...searchTerms].filter(function (w) { return !ReaderSearch.known(w); });
      var terms = new Set([...searchTerms].filter(function (w) { return missing.indexOf(w) === -1; }));
      if (missing.length && terms.size) {
        ReaderSearch.notes.push("Left out (in no page of the book): " + missing.map(function (stem) {
          return ReaderSearch.words[stem] || stem;
        }).join(", ") + ".");
      }
      var results = terms.size ? perform(query, terms, excludedTerms, highlightTerms, objectTerms) : [];
      var words = [...terms].filter(function (w) { return w.length > 2; });
      if (!results.length && words.length > 1) {
        results = ReaderSearch.mostWords(words, excludedTerms);
        results.forEach(function (r) { r[4] = Scorer.score(r); });
        if (results.length) {
          ReaderSearch.notes.push("No page holds every word of the query: these pages hold the most of them.");
        }
      }
      var card = Scorer.rank(ANSWERS, true);
      var listed = results.some(function (r) { return r[0] === ANSWERS_PAGE; });
      if (card && !listed && card.words >= 2 && card.only) {
        var index = Search._index, file = index.docnames.indexOf(ANSWERS_PAGE);
        if (file !== -1) {
          var answer = [ANSWERS_PAGE, index.titles[file], "", null, 0, index.filenames[file]];
          answer[4] = Scorer.score(answer);
          results.push(answer);
        }
      }
      results.sort(function (a, b) { return a[4] === b[4] ? 0 : (a[4] > b[4] ? 1 : -1); });
      if (!results.length) {
        ReaderSearch.notes.push("NOHIT");
      }
      ReaderSearch.show();
      return results;
    };
  },
  show: function () {
    var out = document.getElementById("search-results");
    if (!out || !ReaderSearch.notes.length) { return; }
    var note = document.createElement("div");
    note.className = "search-readers-note";
    ReaderSearch.notes.forEach(function (text) {
      var p = note.appendChild(document.createElement("p"));
      if (text !== "NOHIT") { p.textContent = text; return; }
      var root = (typeof DOCUMENTATION_OPTIONS !== "undefined" && DOCUMENTATION_OPTIONS.URL_ROOT) || "";
      p.className = "search-nohit";
      p.append("Nothing in the book matches these words. The five questions this book answers are on the ");
      var answers = p.appendChild(document.createElement("a"));
      answers.href = root + "book/answers.html";
      answers.textContent = "Short answers";
      p.append(" page; every claim is listed in the ");
      var claims = p.appendChild(document.createElement("a"));
      claims.href = root + "book/claims.html";
      claims.textContent = "claims index";
      p.append(", and the terms in the ");
      var glossary = p.appendChild(document.createElement("a"));
      glossary.href = root + "book/glossary.html";
      glossary.textContent = "glossary";
      p.append(".");
    });
    out.insertBefore(note, Search.output || null);
  }
};
ReaderSearch.install();
