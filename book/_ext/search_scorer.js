// The search page's scorer (html_search_scorer; book/_ext/book_site.py fills in ANSWERS at build time).
// Sphinx's searchtools.js lists every page that holds all the words of a query, at the top of the
// page, ranked by a few weights (a word in a title scores 15, in the text 5). Two changes:
// * A query in the words of one of the five source questions puts the Short answers page first,
//   opened at that question's card: ANSWERS holds each card's anchor and the reader's words for
//   it (book/_data/answers.yml, "search"); the card with the most matching words, weighted by
//   how few cards share the word, wins.
// * Every other hit opens at the section whose title shares most words with the query (weighted
//   the same way among the page's titles), not at the top of a page 25-57 phone screens long.
var ANSWERS = /*ANSWERS*/ {};
var ANSWERS_PAGE = /*ANSWERS_PAGE*/ "";
var Scorer = {
  // Sphinx's defaults (searchtools.js uses its own Scorer only when none is defined)
  objNameMatch: 11, objPartialMatch: 6, objPrio: {0: 15, 1: 5, 2: -5}, objPrioDefault: 0,
  title: 15, partialTitle: 7, term: 5, partialTerm: 2,
  _stems: null, _titles: null,
  queryStems: function () {
    if (Scorer._stems) { return Scorer._stems; }
    var query = new URLSearchParams(window.location.search).get("q") || "";
    Scorer._stems = Scorer.stemsOf(query);
    return Scorer._stems;
  },
  stemsOf: function (text) {
    var stemmer = typeof Stemmer === "undefined" ? null : new Stemmer();
    var stop = typeof stopwords === "undefined" ? [] : stopwords;
    var out = [];
    String(text).toLowerCase().split(/[^\w]+/).forEach(function (word) {
      if (!word || stop.indexOf(word) !== -1) { return; }
      var stem = stemmer ? stemmer.stemWord(word) : word;
      if (out.indexOf(stem) === -1) { out.push(stem); }
    });
    return out;
  },
  // The candidate (of {key: text}) sharing most query words, each word weighted 1/(candidates holding
  // it); unless anyWord, none unless it shares a word that at most a third of the candidates hold
  // (a word every section title holds, "attention", picks no section); ties go to the first.
  best: function (candidates, anyWord) {
    var query = Scorer.queryStems(), stems = {}, holders = {}, best = null, bestScore = 0;
    var count = Object.keys(candidates).length;
    Object.keys(candidates).forEach(function (key) {
      stems[key] = Scorer.stemsOf(candidates[key]);
      stems[key].forEach(function (s) { holders[s] = (holders[s] || 0) + 1; });
    });
    Object.keys(candidates).forEach(function (key) {
      var score = 0;
      var distinctive = false;
      query.forEach(function (s) {
        if (stems[key].indexOf(s) === -1) { return; }
        score += 1 / holders[s];
        if (holders[s] <= Math.max(1, count / 3)) { distinctive = true; }
      });
      if ((distinctive || anyWord) && score > bestScore + 1e-9) { best = key; bestScore = score; }
    });
    return best;
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
  score: function (result) {
    // result: [docname, title, anchor, descr, score, filename]
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
        result[1] = result[1] + " > " + sections[anchor];
      }
    }
    return result[4];
  }
};
