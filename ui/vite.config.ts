import { defineConfig } from 'vite';
import { svelte } from '@sveltejs/vite-plugin-svelte';

// `medusa serve` answers the API; `npm run dev` proxies to it (MEDUSA_API, default :8080).
const api = process.env.MEDUSA_API ?? 'http://127.0.0.1:8080';

export default defineConfig({
  plugins: [svelte()],
  clearScreen: false,
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022' },
  server: {
    port: 5173,
    strictPort: true,
    // `ws`: the page's event stream (/api/events) is a WebSocket.
    proxy: Object.fromEntries(
      ['/api', '/v1', '/generate', '/compare', '/health', '/metrics'].map((p) => [p, { target: api, ws: true }]),
    ),
  },
  test: { include: ['src/**/*.test.ts'], environment: 'node' },
});
