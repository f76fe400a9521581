// The cluster page's Connect panel: a Copy button puts its command on the
// clipboard, and says so.
"use strict";
for (const b of document.querySelectorAll("button.copy[data-copy]")) {
  b.addEventListener("click", async () => {
    const text = document.getElementById(b.dataset.copy).textContent;
    try {
      await navigator.clipboard.writeText(text);
      b.textContent = "Copied";
    } catch (e) {
      // No clipboard (plain HTTP, or refused): select it to copy by hand.
      const range = document.createRange();
      range.selectNodeContents(document.getElementById(b.dataset.copy));
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      b.textContent = "Selected: press Ctrl+C";
    }
    setTimeout(() => { b.textContent = "Copy"; }, 2000);
  });
}
