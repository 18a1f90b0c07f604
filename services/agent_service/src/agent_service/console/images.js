// A message's images: its content read as text and image parts, and the images shown as thumbnails.
// A message's content is its text, or a list of parts: {type: "text", text} and {type: "image_url",
// image_url: {url}}. A stored image (/api/v1/agent/images/<sha256>) needs the key: it is fetched and shown from
// an object URL (the page's policy allows images from this origin, data: and blob: only; an https image is
// named by a link, never loaded).
import { api } from "./api.js";
import { el } from "./dom.js";

const STORED_IMAGE = /^\/api\/v1\/agent\/images\/[0-9a-f]{64}$/; // a stored run keeps its images by reference

export function textOf(content) {
  if (Array.isArray(content)) {
    return content
      .filter((part) => part && part.type === "text")
      .map((part) => part.text)
      .join("\n");
  }
  return String(content ?? "");
}

export function imagesOf(content) {
  if (!Array.isArray(content)) return [];
  return content.filter((part) => part && part.type === "image_url" && part.image_url).map((part) => part.image_url.url);
}

const storedImages = new Map(); // stored image path -> Promise of its object URL (each fetched once a page)

function storedImageUrl(path) {
  if (!storedImages.has(path)) {
    const loading = api(path)
      .then((response) => response.blob())
      .then((blob) => URL.createObjectURL(blob));
    loading.catch(() => storedImages.delete(path)); // a failure is tried again next time it is shown
    storedImages.set(path, loading);
  }
  return storedImages.get(path);
}

// The images of a message, as thumbnails (a click shows the picture whole, another click small again).
export function imageStrip(urls, alt) {
  const strip = el("div", "message-images");
  for (const url of urls) {
    if (url.startsWith("data:image/")) {
      strip.appendChild(thumbnail(url, alt));
    } else if (STORED_IMAGE.test(url)) {
      const slot = el("span", "image-loading", "loading image…");
      strip.appendChild(slot);
      storedImageUrl(url).then(
        (objectUrl) => slot.replaceWith(thumbnail(objectUrl, alt, url)),
        (failure) => {
          slot.className = "image-missing";
          slot.textContent = `image unavailable (${failure.code || "network"})`;
        },
      );
    } else if (/^https:\/\//.test(url)) {
      const link = el("a", "image-link", url);
      link.href = url;
      link.rel = "noopener noreferrer";
      link.target = "_blank";
      strip.appendChild(link);
    }
  }
  return strip;
}

export function thumbnail(src, alt, stored) {
  const image = el("img", "message-image");
  image.src = src;
  image.alt = alt;
  if (stored) image.dataset.stored = stored;
  image.addEventListener("click", () => image.classList.toggle("whole"));
  return image;
}

export function formatBytes(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
