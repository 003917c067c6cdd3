// A tokenizer thread (piscina, started by TokenizerPool in src/tokenizer/pool.ts): loads the
// served tokenizer once, then encodes texts and renders-and-encodes conversations, answering with
// one moved buffer (ids, then the prompt's UTF-8), or the task's coded error as plain data.
import { move, workerData } from 'piscina';
import { toRingserveError } from '../src/errors.js';
import { packRendered, type TokenizeFailure, type TokenizeTask } from '../src/tokenizer/pool.js';
import { openTokenizer, type TokenizerSource } from '../src/tokenizer/source.js';

const tokenizer = await openTokenizer(workerData as TokenizerSource);

export default function tokenize(task: TokenizeTask): unknown {
  try {
    if (task.kind === 'encode') {
      const ids = tokenizer.encode(task.text, { addSpecialTokens: task.addSpecialTokens });
      return move(packRendered(ids, null));
    }
    const prompt = tokenizer.applyChatTemplate(task.messages, task.options);
    const ids = tokenizer.encode(prompt, { addSpecialTokens: task.addSpecialTokens });
    return move(packRendered(ids, prompt));
  } catch (err) {
    const e = toRingserveError(err);
    return {
      code: e.code,
      message: e.message,
      statusCode: e.statusCode,
      param: e.param,
    } satisfies TokenizeFailure;
  }
}
