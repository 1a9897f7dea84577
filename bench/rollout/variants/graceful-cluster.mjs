// graceful-cluster: the app attaches the worker helper; bench/rollout.js runs it
// under the CLI (`graceful-cluster --workers 2 ... graceful-cluster.mjs`).
import http from 'node:http';
import {attach} from '../../../dist/src/worker/index.js';
import handler from './handler.cjs';

const server = http.createServer(handler.handle);
attach(server);
server.listen(handler.port, handler.host);
