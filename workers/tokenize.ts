// A tokenizer thread (piscina, started by TokenizerPool in src/tokenizer/pool.ts): the only place
// an API server parses tokenizer.json and holds its BPE tables and chat template. It describes the
// tokenizer to the pool (the shared byte table and plain fields), encodes texts, renders-and-encodes
// conversations (answering with one moved buffer: ids, then the prompt's UTF-8), and decodes for
// tokenizer families the byte table cannot; a failure, the load's included, comes back as the
// coded error in plain data.
import { move, workerData } from 'piscina';
import { errorToData, toRingserveError } from '../src/errors.js';
import { answerMemoryCollect } from '../src/obs/memory-collect.js';
import { packRendered, type TokenizeFailure, type TokenizeTask } from '../src/tokenizer/pool.js';
import { openTokenizer, type TokenizerSource } from '../src/tokenizer/source.js';
import type { Tokenizer } from '../src/tokenizer/tokenizer.js';
import { describeTokenizer } from '../src/tokenizer/tokenizer-view.js';

answerMemoryCollect('timer');
const loading: Promise<Tokenizer | Error> = openTokenizer(workerData as TokenizerSource).catch(
  (err: unknown) => toRingserveError(err),
);

export default async function tokenize(task: TokenizeTask): Promise<unknown> {
  try {
    const tokenizer = await loading;
    if (tokenizer instanceof Error) throw tokenizer;
    switch (task.kind) {
      case 'describe':
        return describeTokenizer(tokenizer);
      case 'encode':
        return move(
          packRendered(
            tokenizer.encode(task.text, { addSpecialTokens: task.addSpecialTokens }),
            null,
          ),
        );
      case 'chat': {
        const prompt = tokenizer.applyChatTemplate(task.messages, task.options);
        const ids = tokenizer.encode(prompt, { addSpecialTokens: task.addSpecialTokens });
        return move(packRendered(ids, prompt));
      }
      case 'decode':
        return tokenizer.decode(task.ids, { skipSpecialTokens: task.skipSpecialTokens });
      case 'token-strs':
        return Array.from(task.ids, (id) => tokenizer.idToToken(id));
    }
  } catch (err) {
    return { error: errorToData(err) } satisfies TokenizeFailure;
  }
}
