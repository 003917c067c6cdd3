import { pack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { MsgWriter } from '../../../src/engine/vllm/msgpack-writer.js';

describe('MsgWriter.str', () => {
  it('writes the bytes msgpackr writes, for short ASCII (inline path) and every other string', () => {
    const cases = [
      '',
      '<i4',
      'a'.repeat(31),
      'a'.repeat(32),
      'réq-é',
      `${'x'.repeat(30)}é`,
      '语'.repeat(100),
      'b'.repeat(70_000),
    ];
    for (const s of cases) {
      const w = new MsgWriter(4);
      w.str(s);
      w.str('tail');
      expect(w.toBuffer()).toEqual(Buffer.concat([pack(s), pack('tail')]));
    }
  });
});
