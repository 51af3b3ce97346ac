/**
 * Svelte action: keeps a scrolling box pinned to its end while content streams in, unless the
 * reader has scrolled up to read.
 */
export function follow(node: HTMLElement) {
  let pinned = true;
  const onScroll = () => {
    pinned = node.scrollHeight - node.scrollTop - node.clientHeight < 24;
  };
  const observer = new MutationObserver(() => {
    if (pinned) node.scrollTop = node.scrollHeight;
  });
  observer.observe(node, { childList: true, subtree: true, characterData: true });
  node.addEventListener('scroll', onScroll, { passive: true });
  return {
    destroy() {
      observer.disconnect();
      node.removeEventListener('scroll', onScroll);
    },
  };
}
