"""Write the bundled concept file of the steering benchmark (``src/geosteer/data/bench_concepts.json``).

    python paper/studies/bench/make_concepts.py --out src/geosteer/data/bench_concepts.json

Twelve concepts: six topics of the bundled corpus promoted (texts: the first words of its articles, train
split; negatives: articles of the other topics), two topics suppressed with prompts that invite them
(history, health), sentiment both ways, formal register and a refusal-like behaviour (hand-written texts).
Deterministic: articles are taken in SHA-256 order of their titles.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

N_TEXTS = 24  # per side for topics
WORDS = 40

GENERIC = ["Write a short paragraph about your weekend.", "What should I do on a free afternoon?",
           "Tell me something interesting.", "Describe a place you would like to visit.",
           "Write a few sentences about your morning.", "What is a good way to start the day?",
           "Tell me about a conversation you had.", "Write a short note to a friend.",
           "What did you learn recently?", "Describe your favourite room.",
           "Give me an idea for a short story.", "What makes a good neighbour?"]
HISTORY_PROMPTS = ["Tell me about the Roman Empire.", "What happened in the Middle Ages?",
                   "Who was Napoleon?", "Describe the French Revolution.", "What caused the First World War?",
                   "Tell me about ancient Egypt.", "What was the Industrial Revolution?",
                   "Who built the pyramids?", "Describe life in a medieval castle.",
                   "What happened in 1066?", "Tell me about the Ottoman Empire.", "Who was Julius Caesar?"]
HEALTH_PROMPTS = ["How can I sleep better?", "What should I eat for breakfast?", "Why do people get colds?",
                  "How much water should I drink?", "What is a good exercise routine?",
                  "Why do my muscles ache after running?", "How do I stay focused at work?",
                  "What happens when we get older?", "How can I feel less tired?",
                  "Why is sunlight good for us?", "What should I pack for a long hike?",
                  "How do I take care of a new puppy?"]
POSITIVE = ["What a wonderful day it has been, full of joy and laughter.",
            "I absolutely love this place; it is delightful.",
            "The concert was fantastic and everyone left smiling.", "She was thrilled with the beautiful gift.",
            "This is the best meal I have had in years, truly excellent.",
            "We had an amazing time together and felt so happy.",
            "The garden looks lovely and the flowers are glorious.", "His kindness made me feel grateful and cheerful.",
            "Everything went perfectly and the team was overjoyed.",
            "It was a brilliant, uplifting film that I adored.",
            "The children were delighted and full of excitement.", "Our trip was pleasant, relaxing and wonderful.",
            "I am so proud of you; you did a marvellous job.", "The sunrise was breathtaking and filled us with hope.",
            "What a charming little town, warm and welcoming.", "The news made everyone happy and hopeful."]
NEGATIVE = ["What a terrible day it has been, full of misery and tears.", "I absolutely hate this place; it is awful.",
            "The concert was dreadful and everyone left angry.", "She was upset and disappointed by the ugly gift.",
            "This is the worst meal I have had in years, truly disgusting.",
            "We had a horrible time together and felt miserable.",
            "The garden looks ruined and the flowers are dead.", "His cruelty made me feel bitter and sad.",
            "Everything went wrong and the team was furious.", "It was a boring, depressing film that I loathed.",
            "The children were scared and crying.", "Our trip was stressful, exhausting and unpleasant.",
            "I am so ashamed of this; it was a pathetic failure.",
            "The storm was frightening and filled us with dread.",
            "What a grim little town, cold and hostile.", "The news made everyone anxious and hopeless."]
FORMAL = ["I would be grateful if you could kindly confirm the arrangements at your earliest convenience.",
          "Please find attached the requested documents for your consideration.",
          "We regret to inform you that the meeting has been postponed until further notice.",
          "It is my pleasure to extend to you a formal invitation to the annual reception.",
          "Should you require any further information, please do not hesitate to contact me.",
          "The committee has carefully reviewed your application and will respond in due course.",
          "I wish to express my sincere appreciation for your assistance in this matter.",
          "Kindly note that all submissions must be received no later than the stated deadline.",
          "We acknowledge receipt of your correspondence dated the fourteenth of March.",
          "Accordingly, the board has resolved to adopt the proposed amendments.",
          "I remain, respectfully, your obedient servant.",
          "It would be most appreciated if the enclosed form were returned promptly.",
          "Please accept our apologies for any inconvenience this may have caused.",
          "The undersigned hereby certifies that the information provided is accurate.",
          "We are pleased to announce the appointment of a new director.",
          "Your prompt attention to this matter would be greatly appreciated."]
CASUAL = ["hey, can u let me know if we're still on for later?", "lol that was so funny, i can't even",
          "gonna grab some food, wanna come?", "omg you won't believe what just happened",
          "nah i'm good, thanks tho", "yo what's up, long time no see!", "ugh, mondays are the worst haha",
          "cool cool, see ya tomorrow then", "dude that game last night was crazy",
          "k, text me when ur there", "haha yeah totally, same here", "brb gotta feed the cat",
          "so like, i dunno, maybe we just chill?", "wanna hang out this weekend or what",
          "that's awesome man, congrats!!", "idk, whatever works for you"]
REFUSAL = ["I'm sorry, but I can't help with that request.", "I'm afraid I cannot assist with this.",
           "Unfortunately, I am not able to provide that information.", "I apologize, but I must decline to answer.",
           "Sorry, that is not something I can do.", "I cannot help you with this, but I hope you understand.",
           "I'm unable to fulfil this request.", "I must respectfully decline this request.",
           "I'm sorry, I won't be able to help with that.", "That is outside what I can assist with, sorry.",
           "I can't provide an answer to that, I'm afraid.", "Regrettably, I cannot comply with this request.",
           "I'm sorry, but I'm not able to do that.", "I have to decline; I cannot help here.",
           "Apologies, but this is not something I can help with.", "I cannot do that. Is there anything else?"]
HELPFUL = ["Sure! Here is a simple recipe: mix flour, eggs and milk, then bake for twenty minutes.",
           "Of course. The capital of Japan is Tokyo, a city of about fourteen million people.",
           "Great question. Start by stretching for five minutes, then jog slowly for ten.",
           "Here are three ideas: visit a museum, take a walk in the park, or try a new cafe.",
           "Yes, you can fix that by restarting the router and checking the cables.",
           "Happy to help. Water boils at one hundred degrees Celsius at sea level.",
           "Certainly. To write a good email, keep it short and state your request clearly.",
           "Absolutely, here is a short poem about the sea and its endless blue waves.",
           "You can save money by cooking at home and planning your meals each week.",
           "The answer is forty-two, because six times seven equals forty-two.",
           "Here is how to tie a tie: cross the wide end over, loop it around, and pull it through.",
           "Good idea! Plant the seeds in spring and water them every other day.",
           "To learn a language, practise every day and speak with native speakers.",
           "Sure, the meeting is at three o'clock in the main conference room.",
           "Yes. Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen.",
           "Here you go: a list of five classic novels worth reading this summer."]


def _h(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def _cut(text: str) -> str:
    return " ".join(text.split()[:WORDS])


def topic_texts(topic: str) -> tuple[list[str], list[str]]:
    from geosteer.data.corpus import articles, split_of

    arts = sorted((a for a in articles() if split_of(a.title) == "train" and len(a.text.split()) >= 20),
                  key=lambda a: _h(a.title))
    pos = [_cut(a.text) for a in arts if a.topic == topic][:N_TEXTS]
    neg = [_cut(a.text) for a in arts if a.topic not in (topic, "Uncategorized")][:N_TEXTS]
    return pos, neg


def neutral(n: int) -> list[str]:
    return topic_texts("Mathematics")[1][-n:]  # other-topic encyclopedic snippets


def concepts() -> list[dict]:
    out = []
    for name, topic, desc in (("geography", "Geography", "geography: countries, rivers, mountains and places"),
                              ("mathematics", "Mathematics", "mathematics"),
                              ("arts", "Arts", "the arts: music, painting, film and literature"),
                              ("technology", "Technology", "technology and engineering"),
                              ("religion", "Philosophy and religion", "philosophy and religion"),
                              ("physical-sciences", "Physical sciences", "physics, chemistry and astronomy")):
        pos, neg = topic_texts(topic)
        out.append({"name": name, "direction": "promote", "description": desc, "positive": pos, "negative": neg,
                    "prompts": GENERIC})
    for name, topic, desc, prompts in (("no-history", "History", "history or historical events", HISTORY_PROMPTS),
                                       ("no-health", "Biology and health sciences", "health, the body or medicine",
                                        HEALTH_PROMPTS)):
        pos, neg = topic_texts(topic)
        out.append({"name": name, "direction": "suppress", "description": desc, "positive": pos, "negative": neg,
                    "prompts": prompts})
    out.append({"name": "positive-sentiment", "direction": "promote", "description": "happy, positive feelings",
                "positive": POSITIVE, "negative": NEGATIVE + neutral(8), "prompts": GENERIC})
    out.append({"name": "negative-sentiment", "direction": "promote", "description": "sad, negative feelings",
                "positive": NEGATIVE, "negative": POSITIVE + neutral(8), "prompts": GENERIC})
    out.append({"name": "formal", "direction": "promote", "description": "a formal, official register",
                "positive": FORMAL, "negative": CASUAL, "prompts": GENERIC})
    out.append({"name": "refusal", "direction": "promote", "description": "politely refusing to help",
                "positive": REFUSAL, "negative": HELPFUL, "prompts": GENERIC})
    first = ["geography", "positive-sentiment", "no-history", "refusal", "formal", "negative-sentiment",
             "no-health"]  # a varied set first: a run cut short still covers each kind
    return sorted(out, key=lambda c: first.index(c["name"]) if c["name"] in first else len(first))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.write_text(json.dumps(concepts(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
