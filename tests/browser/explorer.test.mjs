// SPDX-License-Identifier: Apache-2.0
// The attention explorer (`multihead inspect --html`) in a real browser: Debian's chromium, headless, driven
// by playwright-core. Trains small runs with the CLI, writes their pages, and checks what a user sees: the
// grid has layers x heads cells, a click opens the head, hovering a query (a key) highlights the weights the
// page's own data holds for that row (column), causal masks show as masked, an encoder-decoder run has a
// cross-attention view and a causal decoder self-attention view, and a 512-token page of 8 layers x 8 heads
// stays under its size bound and opens.
// Screenshots go to $ARTIFACTS (not committed).
//
//   MULTIHEAD_CLI=build/multihead ARTIFACTS=build/browser-artifacts node tests/browser/explorer.test.mjs
//
// Exit 77 (ctest: skipped) with the reason when chromium or playwright-core is not installed
// (scripts/setup.sh --browser installs both).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const SKIP = 77;
const CLI = resolve(process.env.MULTIHEAD_CLI || "build/multihead");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const ARTIFACTS = resolve(process.env.ARTIFACTS || "build/browser-artifacts");

if (!existsSync(CHROMIUM)) {
  console.log(`SKIPPED: no browser at ${CHROMIUM} (scripts/setup.sh --browser installs Debian's chromium)`);
  process.exit(SKIP);
}
let chromium;
try {
  ({ chromium } = await import("playwright-core"));
} catch {
  console.log("SKIPPED: playwright-core is not installed in tests/browser (scripts/setup.sh --browser)");
  process.exit(SKIP);
}

const dir = mkdtempSync(join(tmpdir(), "mh-explorer-"));
mkdirSync(ARTIFACTS, { recursive: true });
const cli = (...args) => execFileSync(CLI, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
const common = ["--quiet", "--threads", "1", "--num-heads", "2", "--d-model", "16"];

// The page's data, decoded as the page decodes it: query q's weights over every key of (layer, head).
function pageData(html) {
  const m = html.match(/<script type="application\/json" id="mh-data">(.*?)<\/script>/s);
  assert.ok(m, "the page embeds its data");
  const data = JSON.parse(m[1]);
  for (const v of data.views) {
    const bytes = (b64) => Buffer.from(b64, "base64");
    const ix = bytes(v.index), val = bytes(v.value), rm = bytes(v.row_max);
    v.T = v.queries.length;
    v.S = v.keys.length;
    v.weights = (l, h, q) => {
      const r = (l * v.heads + h) * v.T + q, out = new Array(v.S).fill(0), mx = rm.readFloatLE(4 * r);
      for (let e = r * v.k; e < (r + 1) * v.k; e++) out[ix.readUInt16LE(2 * e)] = (val[e] / 255) * mx;
      return out;
    };
  }
  return data;
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
let failures = 0;
async function test(name, body) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  try {
    await body(page);
    console.log(`ok - ${name}`);
  } catch (e) {
    failures++;
    console.log(`not ok - ${name}\n${e.stack}`);
    await page.screenshot({ path: join(ARTIFACTS, `failed-${name.replace(/\W+/g, "_")}.png`), fullPage: true });
  } finally {
    await page.close();
  }
}

async function open(page, file) {
  const t0 = Date.now();
  await page.goto(pathToFileURL(file).href);
  await page.waitForSelector("body[data-ready='1']", { timeout: 30000 });
  return Date.now() - t0;
}

// Hovering query q highlights every key with the weight the data holds; hovering key j every query.
async function checkHover(page, v, l, h, q, j) {
  await page.hover(`#mh-queries .mh-q[data-i='${q}']`);
  const keys = await page.$$eval("#mh-keys .mh-k", (es) =>
    es.map((e) => (e.dataset.weight === undefined ? (e.classList.contains("mh-masked") ? "masked" : null) : +e.dataset.weight)));
  const want = v.weights(l, h, q);
  assert.equal(keys.length, v.S);
  keys.forEach((w, key) => {
    if (v.causal && key > q) assert.equal(w, "masked", `key ${key} after query ${q}`);
    else assert.ok(Math.abs(w - want[key]) < 1e-6, `query ${q}, key ${key}: page shows ${w}, data holds ${want[key]}`);
  });
  const shown = await page.$eval(`#mh-keys .mh-k[data-i='${want.indexOf(Math.max(...want))}'] .mh-w`, (e) => e.textContent);
  assert.equal(+shown, +Math.max(...want).toFixed(3), "the strongest key's number is printed beside it");
  await page.hover(`#mh-keys .mh-k[data-i='${j}']`);
  const queries = await page.$$eval("#mh-queries .mh-q", (es) => es.map((e) => (e.dataset.weight === undefined ? null : +e.dataset.weight)));
  queries.forEach((w, qq) => {
    if (v.causal && j > qq) assert.equal(w, null);
    else assert.ok(Math.abs(w - v.weights(l, h, qq)[j]) < 1e-6, `key ${j}, query ${qq}`);
  });
}

try {
  // A text classifier: 2 layers x 2 heads.
  const csv = join(dir, "tiny.csv");
  const pos = ["good great fine", "great good day", "fine good nice", "nice great good"];
  const neg = ["bad awful poor", "poor bad day", "awful poor bad", "bad poor nasty"];
  writeFileSync(csv, "text,label\n" + Array.from({ length: 16 }, (_, r) => `${pos[r % 4]},pos\n${neg[r % 4]},neg\n`).join(""));
  cli("train", ...common, "--source", "csv", "--data", csv, "--tokenizer", "word", "--vocab-size", "64", "--epochs", "2",
      "--num-layers", "2", "--batch", "8", "--max-len", "16", "--out", join(dir, "cls"));
  const clsPage = join(dir, "cls.html");
  cli("inspect", "--run", join(dir, "cls"), "--text", "good great </script> nice day", "--html", clsPage);

  await test("the grid has a cell per layer and head, and a head opens with its weights", async (page) => {
    const data = pageData(readFileSync(clsPage, "utf8"));
    const v = data.views[0];
    await open(page, clsPage);
    assert.equal(await page.locator(".mh-cell").count(), v.layers * v.heads);
    assert.equal(v.layers * v.heads, 4);
    assert.equal(await page.title(), "Attention explorer");
    assert.ok((await page.textContent(".mh-sub")).includes("</script>"), "the input shows as text");
    // The numbers under each head are explained on the page.
    const captions = await page.textContent("#mh-captions");
    assert.match(captions, /H\/Hmax: the head's attention entropy over the uniform attention's/);
    assert.match(captions, /Δp: how many points the predicted class's probability moves/);
    await page.screenshot({ path: join(ARTIFACTS, "classifier-model-view.png"), fullPage: true });
    assert.equal(await page.locator("#mh-head").count(), 0);
    await page.click(".mh-cell[data-layer='1'][data-head='1']");
    const head = page.locator("#mh-head");
    assert.equal(await head.getAttribute("data-layer"), "1");
    assert.equal(await head.getAttribute("data-head"), "1");
    assert.equal(await page.locator("#mh-queries .mh-q").count(), v.T);
    await checkHover(page, v, 1, 1, 2, 3);
    const stats = await page.textContent(".mh-stats");
    assert.match(stats, new RegExp(`entropy ${v.stats.entropy[3].toFixed(3)} nats`));
    assert.equal(v.stats.ablation.length, 4, "a classifier's page has each head's ablation effect");
    assert.match(await page.textContent("#mh-ablation"), new RegExp(`${Math.abs(100 * v.stats.ablation[3]).toFixed(2)} points$`));
    await page.screenshot({ path: join(ARTIFACTS, "classifier-head-view.png"), fullPage: true });
    // The absolute scale names 1 as its top; per head names the head's maximum.
    await page.selectOption("#mh-scale", "absolute");
    assert.match(await page.textContent("#mh-legend"), /^0.*1$/);
    await page.selectOption("#mh-scale", "head");
    await page.click(".mh-cell[data-layer='0'][data-head='1']");
    assert.match(await page.textContent("#mh-legend"), /this head's maximum, 0\.\d{3}/);
  });

  // A character language model: causal self-attention.
  const text = join(dir, "text.txt");
  writeFileSync(text, "call me ishmael. some years ago never mind how long precisely. ".repeat(40));
  cli("train", ...common, "--preset", "moby-dick", "--data", text, "--steps", "3", "--num-layers", "1", "--out", join(dir, "lm"));
  const lmPage = join(dir, "lm.html");
  cli("inspect", "--run", join(dir, "lm"), "--text", "call me ishmael", "--html", lmPage);
  await test("a language model's keys after the query show as masked", async (page) => {
    const v = pageData(readFileSync(lmPage, "utf8")).views[0];
    assert.equal(v.causal, true);
    await open(page, lmPage);
    await page.click(".mh-cell[data-layer='0'][data-head='0']");
    await checkHover(page, v, 0, 0, 4, 6);
    await page.screenshot({ path: join(ARTIFACTS, "language-model-head-view.png"), fullPage: true });
  });

  // An encoder-decoder (pronunciation) run: encoder self-attention, cross-attention over the letters and the
  // decoder's causal self-attention over the phonemes.
  const sounds = ["AE1", "B", "K", "D", "IY0", "F"];
  const words = Array.from({ length: 150 }, (_, n) => {
    const letters = [Math.floor((n + 36) / 36) % 6, Math.floor((n + 36) / 6) % 6, (n + 36) % 6];
    for (let i = 0; i < n % 3; i++) letters.push((n * 5 + i) % 6);
    return letters.map((c) => String.fromCharCode(65 + c)).join("") + "  " + letters.map((c) => sounds[c]).join(" ");
  });
  const dict = join(dir, "dict.txt");
  writeFileSync(dict, ";;; regular spellings\n" + words.join("\n") + "\n");
  cli("train", ...common, "--preset", "cmudict", "--data", dict, "--epochs", "2", "--num-layers", "1", "--out", join(dir, "pr"));
  const prPage = join(dir, "pr.html");
  cli("inspect", "--run", join(dir, "pr"), "--text", "abcde", "--html", prPage);
  await test("an encoder-decoder run has a cross-attention view over the letters", async (page) => {
    const data = pageData(readFileSync(prPage, "utf8"));
    assert.deepEqual(data.views.map((v) => v.name), ["encoder self-attention", "cross-attention", "decoder self-attention"]);
    const cross = data.views[1];
    assert.deepEqual(cross.keys, ["A", "B", "C", "D", "E"]);
    assert.equal(cross.queries[0], "<s>");
    await open(page, prPage);
    await page.click("button[data-view='1']");
    assert.equal(await page.locator(".mh-cell").count(), cross.layers * cross.heads);
    await page.click(".mh-cell[data-layer='0'][data-head='1']");
    assert.match(await page.textContent("#mh-head h2"), /^cross-attention: layer 0, head 1/);
    await checkHover(page, cross, 0, 1, 1, 2);
    await page.screenshot({ path: join(ARTIFACTS, "cross-attention-head-view.png"), fullPage: true });
  });
  await test("an encoder-decoder run has a causal decoder self-attention view over the phonemes", async (page) => {
    const data = pageData(readFileSync(prPage, "utf8"));
    const self = data.views[2];
    assert.equal(self.causal, true);
    assert.deepEqual(self.keys, self.queries);
    assert.deepEqual(self.queries, data.views[1].queries);
    await open(page, prPage);
    await page.click("button[data-view='2']");
    assert.equal(await page.locator(".mh-cell").count(), self.layers * self.heads);
    await page.click(".mh-cell[data-layer='0'][data-head='0']");
    assert.match(await page.textContent("#mh-head h2"), /^decoder self-attention: layer 0, head 0/);
    await checkHover(page, self, 0, 0, self.T - 1, 0);
    await page.screenshot({ path: join(ARTIFACTS, "decoder-self-attention-head-view.png"), fullPage: true });
  });

  // 512 tokens, 8 layers x 8 heads: each query keeps its 32 largest weights, and the page stays small.
  cli("train", "--quiet", "--threads", "2", "--source", "csv", "--data", csv, "--tokenizer", "word", "--vocab-size", "64",
      "--epochs", "1", "--num-layers", "8", "--num-heads", "8", "--d-model", "64", "--batch", "8", "--max-len", "512",
      "--out", join(dir, "big"));
  const bigPage = join(dir, "big.html");
  const bigText = Array.from({ length: 600 }, (_, i) => pos.concat(neg)[i % 8]).join(" ");
  cli("inspect", "--run", join(dir, "big"), "--text", bigText, "--max-tokens", "512", "--html", bigPage);
  await test("a 512-token page of 8 layers x 8 heads stays under 6 MB and opens", async (page) => {
    const bytes = statSync(bigPage).size;
    assert.ok(bytes < 6e6, `${bytes} bytes`);
    const v = pageData(readFileSync(bigPage, "utf8")).views[0];
    assert.equal(v.T, 512);
    assert.equal(v.k, 32);
    const ms = await open(page, bigPage);
    assert.equal(await page.locator(".mh-cell").count(), 64);
    await page.click(".mh-cell[data-layer='7'][data-head='7']");
    await checkHover(page, v, 7, 7, 100, 5);
    // Measured, not asserted (timings belong in benchmarks): docs/RESULTS.md quotes it.
    console.log(`# 512 tokens, 8 x 8 heads: ${(bytes / 1e6).toFixed(2)} MB, opened (data decoded, grid drawn) in ${ms} ms`);
    await page.screenshot({ path: join(ARTIFACTS, "large-model-view.png") });
  });
} finally {
  await browser.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(failures ? 1 : 0);
