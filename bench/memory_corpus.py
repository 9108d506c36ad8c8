"""A deterministic corpus of personal memories (English and Korean) and questions about them.

Used by `bench/memory.py` for latency and ANN-recall measurements: the sentences
look like what people ask an assistant to remember, so their embeddings cluster
the way real memories do (many birthdays, many allergies, many addresses), which
is harder for an ANN index than random vectors and is what full-text terms
match against.
"""

from __future__ import annotations

import random


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


NAMES = _words(
    "Mina Jun Sora Hyun Alex Sam Priya Diego Lena Omar Yuki Chen Noah Emma Liam Ava Jisoo "
    "Minho Taeyang Eunji Carlos Fatima Ivan Olga Marco Giulia Kenji Aiko Ravi Anika Tom Grace "
    "Ben Chloe Daniel Sofia Lucas Mei Arjun Nora"
)
SURNAMES = _words("Cho Kim Park Lee Choi Patel Garcia Smith Novak Rossi Tanaka Silva Nguyen Weber")
RELATIONS = _words(
    "sister brother mother father friend colleague boss neighbour cousin partner son daughter "
    "aunt uncle grandmother roommate"
)
RELATIONS_KO = _words("여동생 남동생 언니 오빠 엄마 아빠 친구 동료 팀장님 이웃 사촌 아들 딸 이모 삼촌 할머니")
CITIES = _words(
    "Seoul Busan Incheon Daegu Tokyo Osaka Berlin Lisbon Toronto Chicago Austin Sydney Paris "
    "Madrid Prague Vienna Oslo Hanoi Taipei Singapore"
)
CITIES_KO = _words("서울 부산 인천 대구 대전 광주 제주 수원 전주 강릉 도쿄 오사카 파리 베를린")
FOODS = _words(
    "peanuts shellfish gluten dairy eggs soy sesame kiwi strawberries penicillin cats pollen "
    "walnuts shrimp mango"
)
FOODS_KO = _words("땅콩 새우 우유 달걀 복숭아 고양이털 꽃가루 밀가루 게 호두 메밀 조개")
HOBBIES = _words(
    "swimming running yoga climbing cycling tennis piano guitar painting pottery chess "
    "hiking dancing boxing baking"
)
HOBBIES_KO = _words("수영 러닝 요가 클라이밍 자전거 테니스 피아노 기타 그림 도자기 바둑 등산 춤 복싱")
WEEKDAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
WEEKDAYS_KO = _words("월요일 화요일 수요일 목요일 금요일 토요일 일요일")
MONTHS = _words(
    "January February March April May June July August September October November December"
)
JOBS = _words(
    "nurse teacher lawyer designer engineer chef pilot accountant barista researcher "
    "pharmacist architect"
)
PETS = _words("Bori Nabi Coco Max Luna Toto Mochi Kong Haru Biscuit")
DRINKS = ("coffee", "tea", "matcha", "oat lattes", "sparkling water", "green tea", "hot chocolate")
LANGS = _words("Spanish Japanese Korean French German Italian Mandarin Portuguese")
APPOINTMENTS = ("dentist", "dermatologist", "eye doctor", "physiotherapist", "vet", "hair salon")
PLACES = ("home", "office", "studio", "parents' cabin", "gym")

EN_TEMPLATES = (
    "My {rel} {name}'s birthday is {month} {day}.",
    "{name}, my {rel}, lives in {city}.",
    "My {rel} {name} is allergic to {food}.",
    "I'm allergic to {food}.",
    "I have a {appt} appointment with Dr. {surname} on {weekday} at {hour} o'clock.",
    "I go {hobby} every {weekday} morning.",
    "The {place} Wi-Fi password is {pet}{num}.",
    "My {rel} {name} works as a {job} in {city}.",
    "I'm saving up for a trip to {city} in {month}.",
    "{name}'s phone number ends in {num4}.",
    "My {rel}'s dog is called {pet}.",
    "I parked on level {small} of the {city} airport garage.",
    "I owe {name} {num} dollars for the concert tickets.",
    "I started learning {lang} in {month} {year}.",
    "{name} prefers {drink} and hates loud restaurants.",
    "Remind me that {name} moved to {city} in {year}.",
    "My {rel} {name} is vegetarian and loves {city} food.",
    "{name} and I went {hobby} in {city} last {month}.",
    "My locker number at the gym is {num}.",
    "{name} {surname} is my {job}; call them on {weekday}s.",
)
KO_TEMPLATES = (
    "내 {rel_ko} {name}의 생일은 {m}월 {d}일이야.",
    "{name}는 {city_ko}에 살아.",
    "나는 {food_ko} 알레르기가 있어.",
    "우리 {rel_ko}는 {food_ko}를 못 먹어.",
    "매주 {weekday_ko}마다 {hobby_ko}를 해.",
    "{weekday_ko} {hour}시에 {name}랑 약속이 있어.",
    "{rel_ko} {name}는 {city_ko}에서 일해.",
    "{m}월에 {city_ko} 여행을 가려고 돈을 모으는 중이야.",
    "우리 집 강아지 이름은 {pet}야.",
    "{name}한테 {num}만원 빌렸어.",
    "{year}년부터 {hobby_ko}를 배우고 있어.",
    "{name}의 전화번호 뒷자리는 {num4}이야.",
)
EN_QUESTIONS = (
    "When is {name}'s birthday?",
    "Where does my {rel} live?",
    "What is {name} allergic to?",
    "When do I see the {appt}?",
    "Which days do I go {hobby}?",
    "What's the {place} Wi-Fi password?",
    "What does {name} do for a living?",
    "How much money do I owe {name}?",
    "When did I start learning {lang}?",
    "What is my {rel}'s dog called?",
)
KO_QUESTIONS = (
    "{name} 생일이 언제야?",
    "{name}는 어디 살아?",
    "내가 무슨 알레르기가 있지?",
    "{weekday_ko}에 무슨 약속 있어?",
    "강아지 이름이 뭐였지?",
    "{name}한테 얼마 빌렸지?",
)


def _slots(rng: random.Random) -> dict:
    return {
        "name": rng.choice(NAMES), "surname": rng.choice(SURNAMES),
        "rel": rng.choice(RELATIONS), "rel_ko": rng.choice(RELATIONS_KO),
        "city": rng.choice(CITIES), "city_ko": rng.choice(CITIES_KO),
        "food": rng.choice(FOODS), "food_ko": rng.choice(FOODS_KO),
        "hobby": rng.choice(HOBBIES), "hobby_ko": rng.choice(HOBBIES_KO),
        "weekday": rng.choice(WEEKDAYS), "weekday_ko": rng.choice(WEEKDAYS_KO),
        "month": rng.choice(MONTHS), "m": rng.randint(1, 12), "day": rng.randint(1, 28),
        "d": rng.randint(1, 28), "hour": rng.randint(7, 20), "year": rng.randint(2015, 2026),
        "job": rng.choice(JOBS), "pet": rng.choice(PETS), "drink": rng.choice(DRINKS),
        "lang": rng.choice(LANGS), "appt": rng.choice(APPOINTMENTS),
        "place": rng.choice(PLACES), "num": rng.randint(10, 999),
        "num4": rng.randint(1000, 9999), "small": rng.randint(1, 6),
    }


def _generate(count: int, templates_en, templates_ko, seed: int, ko_share: float) -> list[str]:
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    while len(seen) < count:
        templates = templates_ko if rng.random() < ko_share else templates_en
        seen.setdefault(rng.choice(templates).format(**_slots(rng)), None)
    return list(seen)


def memories(count: int, seed: int = 7) -> list[str]:
    """`count` distinct memory sentences, about 30% Korean."""
    return _generate(count, EN_TEMPLATES, KO_TEMPLATES, seed, 0.3)


def questions(count: int, seed: int = 11) -> list[str]:
    """`count` distinct questions a user might ask about such memories."""
    return _generate(count, EN_QUESTIONS, KO_QUESTIONS, seed, 0.3)
