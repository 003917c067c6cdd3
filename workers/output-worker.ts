// The output worker thread of an API server: one per server, started by OutputWorker.start()
// (src/server/main/output-worker-handle.ts) with OutputWorkerData. The loop lives in
// src/server/output-worker/output-loop.ts so it can be read and tested without a thread.
import { workerData } from 'node:worker_threads';
import { answerMemoryCollect } from '../src/obs/memory-collect.js';
import { startThreadHealth } from '../src/obs/thread-health-share.js';
import type { OutputWorkerData } from '../src/server/cross-thread/messages.js';
import { OutputLoop } from '../src/server/output-worker/output-loop.js';
import { lowerThisThread, SAME_PRIORITY } from '../src/shm/thread-priority.js';

const data = workerData as OutputWorkerData;
// Before the loop is built: its request recorder publishes this thread's health once per step.
const health = startThreadHealth('output');
lowerThisThread(data.priority ?? SAME_PRIORITY);
// Its loop never returns to the event loop: it answers a request to collect from its idle pass.
new OutputLoop(data, answerMemoryCollect('poll')).run();
health?.stop();
data.port.close();
